"""Fault injection for tests: the one place where rltool can be told to die, hang or crawl.

Production code marks its fault points with one call, ``point(name, **where)``; nothing happens
unless a test set one of these variables (in the environment of the process it starts) or
:data:`test_hook`:

- ``RLTOOL_CHECKPOINT_KILL=<step>[@<n>]``: SIGKILL at ``checkpoint.<step>`` (one of
  :data:`CHECKPOINT_STEPS`) of this process's n-th checkpoint write (default the 1st);
- ``RLTOOL_DIST_KILL=<rank>@<iteration>[:STOP]``: that rank kills itself (``:STOP``: stops, a
  hang) at ``dist.iteration``, as it starts that iteration's collectives;
- ``RLTOOL_DIST_SLOW=<rank>:<seconds>``: that rank pauses after each env step at
  ``dist.env_step`` (a straggler, while ``distributed.sync_fraction`` is on);
- ``RLTOOL_JOB_SIGNAL=<job>:<SIGNAL>``: the process running sweep job ``<job>`` sends itself
  ``SIGNAL`` (``SIGTERM``, ``SIGKILL``) at its first ``checkpoint.start``;
- ``RLTOOL_WRITE_FAULT=<ERRNO>[:<glob>][@<n>]``: ``write`` (every write into a run folder,
  :mod:`rltool.runfolder.writes` and the lock) raises ``OSError(ERRNO)`` (``ENOSPC``, ``EACCES``,
  ...) from
  the n-th write whose path matches ``glob`` (default ``*``, every path) on: a full disk stays
  full.

:data:`test_hook`, when set (in-process tests), is called with every point's name first (a write:
``write:<path>``): it may raise to crash the run there.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import signal
import time
from collections.abc import Callable

CHECKPOINT_STEPS = ("after_temp_write", "after_fsync", "after_rename", "before_pointer")

test_hook: Callable[[str], None] | None = None
job: int | None = None  # the sweep job this process runs (set by rltool.sweeps.jobs.run_job)
_writes = 0  # checkpoint writes of this process (counted at checkpoint.start)
_file_writes = 0  # writes matching RLTOOL_WRITE_FAULT's glob so far


def point(name: str, *, rank: int = 0, iteration: int = 0, path: os.PathLike | None = None) -> None:
    """Fault point ``name`` (``checkpoint.start``, ``checkpoint.<step>``, ``dist.iteration``,
    ``dist.env_step``, ``write``), reached by ``rank`` at ``iteration``, writing ``path``."""
    global _writes
    if test_hook is not None:
        test_hook(name if path is None else f"{name}:{path}")
    if name == "write":
        _write_fault(path)
    elif name == "checkpoint.start":
        _writes += 1
        _job_signal()
    elif name.startswith("checkpoint."):
        _checkpoint_kill(name.removeprefix("checkpoint."))
    elif name == "dist.iteration":
        _dist_kill(rank, iteration)
    elif name == "dist.env_step":
        _dist_slow(rank)


def _checkpoint_kill(step: str) -> None:
    spec = os.environ.get("RLTOOL_CHECKPOINT_KILL")
    if spec:
        at, _, nth = spec.partition("@")
        if at == step and _writes == int(nth or 1):
            os.kill(os.getpid(), signal.SIGKILL)


def _job_signal() -> None:
    num, _, sig = os.environ.get("RLTOOL_JOB_SIGNAL", "").partition(":")
    if job is not None and num == str(job) and _writes == 1:
        os.kill(os.getpid(), getattr(signal, sig))


def _dist_kill(rank: int, iteration: int) -> None:
    spec = os.environ.get("RLTOOL_DIST_KILL")
    if spec:
        where, _, how = spec.partition(":")
        if where == f"{rank}@{iteration}":
            os.kill(os.getpid(), signal.SIGSTOP if how == "STOP" else signal.SIGKILL)


def _dist_slow(rank: int) -> None:
    who, _, pause = os.environ.get("RLTOOL_DIST_SLOW", "").partition(":")
    if who == str(rank):
        time.sleep(float(pause))


def _write_fault(path) -> None:
    global _file_writes
    spec = os.environ.get("RLTOOL_WRITE_FAULT")
    if not spec:
        return
    spec, _, nth = spec.partition("@")
    code, _, glob = spec.partition(":")
    if fnmatch.fnmatchcase(os.fspath(path), glob or "*"):
        _file_writes += 1
        if _file_writes >= int(nth or 1):
            number = getattr(errno, code)
            raise OSError(number, os.strerror(number), os.fspath(path))
