"""One writer per run folder: an exclusive ``flock`` on ``<run>/.lock``, held by whatever writes
into the folder (a run, a resume, a sweep job) for as long as it writes.

The OS releases the lock when the process dies, however it dies, so a killed run never leaves a
stale lock. The file records the holder's host and pid so that a refused writer can name it; the
file itself is kept (removing it would let two processes lock two different files).

On a local file system the lock is exact. On NFS, Linux turns ``flock`` into an NFS byte-range
lock (NLM for NFSv3, the protocol's own locks for NFSv4): it holds across machines when the mount
supports locking, and only between processes of one machine on mounts with ``nolock`` or
``local_lock=all`` (docs/concepts/run-folder.md).
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from rltool.errors import UserError
from rltool.runfolder.layout import RunFolder
from rltool.runfolder.writes import writing


class RunLocked(UserError):
    """Another live process holds the run folder's lock."""

    def __init__(self, run_dir: Path, holder: str):
        super().__init__(
            f"{run_dir} is in use by another rltool process ({holder}): wait for it to end "
            "(or stop it), or write to another folder"
        )
        self.run_dir, self.holder = run_dir, holder


# run folder -> (fd, the lock file's bytes before this process took it; None: there was none)
_HELD: dict[Path, tuple[int, bytes | None]] = {}


def holder(run_dir: Path) -> str:
    """What the lock file says about its holder (``host H, pid P, since T``), or ``unknown``."""
    try:
        text = RunFolder(run_dir).lock.read_text().strip()
    except OSError:
        text = ""
    return text or "holder unknown"


def acquire(run_dir: Path) -> bool:
    """Takes the lock of ``run_dir`` (an existing folder) for this process, or raises
    :class:`RunLocked` at once when another process holds it. Returns False when this process
    already held it (nothing changes then), True when it took it now."""
    run_dir = Path(run_dir).resolve()
    if run_dir in _HELD:
        return False
    path = RunFolder(run_dir).lock
    while True:
        try:
            previous = path.read_bytes()
        except FileNotFoundError:
            previous = None
        with writing(path):  # a read-only folder: one OSFault line, exit 5
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunLocked(run_dir, holder(run_dir)) from None
            raise
        try:  # the file we locked must still be the one at the path (not unlinked meanwhile)
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    if previous is not None:  # read before the lock: read again now that nobody writes it
        previous = os.pread(fd, os.fstat(fd).st_size, 0)
    since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    record = f"host {socket.gethostname()}, pid {os.getpid()}, since {since}\n".encode()
    try:
        with writing(path):
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
    except BaseException:
        os.close(fd)
        raise
    _HELD[run_dir] = (fd, previous)
    return True


def undo(run_dir: Path) -> None:
    """Puts the lock file back as it was before this process took the lock (removes it when
    there was none), still holding the lock: a refused run leaves its folder as it found it."""
    run_dir = Path(run_dir).resolve()
    if run_dir not in _HELD:
        return
    fd, previous = _HELD[run_dir]
    if previous is None:
        RunFolder(run_dir).lock.unlink(missing_ok=True)
    else:
        os.ftruncate(fd, 0)
        os.pwrite(fd, previous, 0)


def release(run_dir: Path) -> None:
    """Gives the lock back; the file stays (see the module docstring)."""
    run_dir = Path(run_dir).resolve()
    fd, _ = _HELD.pop(run_dir, (None, None))
    if fd is not None:
        os.close(fd)


def held(run_dir: Path) -> bool:
    """Whether this process holds the lock of ``run_dir``."""
    return Path(run_dir).resolve() in _HELD


def held_elsewhere(run_dir: Path) -> bool:
    """Whether another live process holds the lock of ``run_dir`` (creates nothing)."""
    if held(run_dir):
        return False
    try:
        fd = os.open(RunFolder(run_dir).lock, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock it may just have taken
    return False


@contextmanager
def hold(run_dir: Path):
    """The lock for the block (a no-op when this process holds it already)."""
    took = acquire(run_dir)
    try:
        yield
    finally:
        if took:
            release(run_dir)
