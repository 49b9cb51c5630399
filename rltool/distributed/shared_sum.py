"""The gradients' sum over ranks on one host through shared memory instead of gloo's sockets.

Every rank copies its flat buffer into its own slot of a file in ``/dev/shm`` that all ranks
map, one gloo barrier (a one-element all-reduce) says that every slot is written, and each rank
adds the slots up in rank order: the same numbers on every rank, and for two ranks the same bits
as gloo's sum (a + b). Two sets of slots are used in turn, so a rank that runs ahead writes into
the set nobody is still reading: one barrier per sum. Measured on the 2-core dev machine for the
MiniGrid preset's 1.7 MB buffer: 0.9 ms a sum against gloo's 3.5 ms (median; p90 1.5 against 12).

:func:`open_shared_sum` opens it where it applies (every rank on this host, the gradients on the
CPU, room in ``/dev/shm``) and returns None elsewhere, on which the ranks agree.
"""

from __future__ import annotations

import os
import socket
import tempfile

import torch
import torch.distributed as dist

SHM = "/dev/shm"


def _host() -> str:
    """This machine: its name and its boot (containers on one host may share a name)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def _create(nbytes: int) -> str | None:
    """A file of ``nbytes`` in /dev/shm with its pages reserved (a write into a full tmpfs
    would kill the process with SIGBUS); None where there is no room."""
    if not os.path.isdir(SHM):
        return None
    fd, path = tempfile.mkstemp(prefix="rltool-grads-", dir=SHM)
    try:
        os.posix_fallocate(fd, 0, nbytes)
    except OSError:
        os.unlink(path)
        return None
    finally:
        os.close(fd)
    return path


class SharedSum:
    """Sums flat float32 CPU buffers of ``numel`` elements over the ranks of ``comm``."""

    def __init__(self, comm, path: str, numel: int):
        self.comm, self.turn = comm, 0  # turn: the set of slots this sum writes
        size = 2 * comm.world * numel
        mapped = torch.from_file(path, shared=True, size=size, dtype=torch.float32)
        self.slots = mapped.view(2, comm.world, numel)
        self.flag = torch.zeros(1)

    def sum_(self, flat: torch.Tensor) -> torch.Tensor:
        """``flat`` (this rank's, [numel] float32) replaced by the sum of every rank's."""
        slots = self.slots[self.turn]
        self.turn ^= 1
        slots[self.comm.rank].copy_(flat)
        self.comm._call(dist.all_reduce, self.flag, group=self.comm.cpu)  # every slot written
        flat.copy_(slots[0])
        for r in range(1, self.comm.world):
            flat.add_(slots[r])
        return flat


def open_shared_sum(comm, numel: int) -> SharedSum | None:
    """A :class:`SharedSum` when every rank of ``comm`` runs on this host, else None (all ranks
    get the same answer). A collective: every rank calls it."""
    hosts = [None] * comm.world
    comm._call(dist.all_gather_object, hosts, _host(), group=comm.cpu)
    if len(set(hosts)) != 1:
        return None
    path = _create(2 * comm.world * numel * 4) if comm.writer else None
    path = comm.share(path)
    if path is None:
        return None
    shared, failed = None, False
    try:
        shared = SharedSum(comm, path, numel)
    except (OSError, RuntimeError):
        failed = True
    failed = comm.any(failed)  # also the barrier after which every rank holds its mapping
    if comm.writer:
        os.unlink(path)  # the mappings stay; nothing is left in /dev/shm
    return None if failed else shared
