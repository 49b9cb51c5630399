"""Writing the run folder: atomic writes that leave no temp file behind, and the OS's refusals
(disk full, over quota, no permission, a read-only file system) named as what they are.

Every file rltool writes into a run folder goes through :func:`atomic_write` (checkpoints, the
``latest`` pointer, ``status.json``, ``config.yaml``, ``summary.json``, ``eval.json``, the metrics
file when it is rewritten) or :func:`writing` (an append, the lock). A refusal becomes an
:class:`~rltool.errors.OSFault`: one line with the path and the fix, exit 5, never "a bug in
rltool". Each write is the fault point ``write`` (:mod:`rltool.testing.faults`).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rltool.errors import OSFault
from rltool.testing import faults as _faults

_SPACE = "free space there (df -h), then run the command again (a run continues with resume=)"
_PERMISSION = (
    "make the folder writable (chmod u+w, chattr -i, a read-write mount) or copy the run to a "
    "writable folder, then run the command again"
)
# errno -> (what happened, the fix)
OS_FAULTS = {
    errno.ENOSPC: ("no space left on device", _SPACE),
    errno.EDQUOT: ("disk quota exceeded", _SPACE.replace("free space", "free space or quota")),
    errno.EACCES: ("permission denied", _PERMISSION),
    errno.EPERM: ("operation not permitted", _PERMISSION),
    errno.EROFS: ("read-only file system", _PERMISSION),
}


def os_fault(exc: BaseException, path: os.PathLike | str | None = None) -> OSFault | None:
    """The :class:`OSFault` for ``exc`` (or an exception it was raised from) when the OS refused
    a write for one of :data:`OS_FAULTS`' reasons, else None. ``path``: what was being written,
    when the OSError does not say."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSFault):
            return exc
        if isinstance(exc, OSError) and exc.errno in OS_FAULTS:
            what, fix = OS_FAULTS[exc.errno]
            where = path if path is not None else exc.filename
            verb = "write" if path is not None else "access"  # raised outside a writer
            target = f"cannot {verb} {where}" if where is not None else "a write failed"
            fault = OSFault(f"{target}: {what} ({errno.errorcode[exc.errno]}): {fix}")
            fault.__cause__ = exc
            return fault
        exc = exc.__cause__ or exc.__context__
    return None


@contextmanager
def writing(path: os.PathLike | str) -> Iterator[None]:
    """Inside the block, an OS refusal while writing ``path`` is raised as an OSFault."""
    try:
        _faults.point("write", path=path)
        yield
    except OSError as e:
        fault = os_fault(e, path)
        if fault is None:
            raise
        raise fault from e


def atomic_write(path: Path, write: Callable, points: bool = False) -> None:
    """``write(file)`` into a temp file beside ``path``, flush, fsync, rename over ``path``; the
    temp file is removed when anything fails. ``points``: the checkpoint's fault points."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with writing(path):
        try:
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                if points:
                    _faults.point("checkpoint.after_temp_write")
                os.fsync(f.fileno())
            if points:
                _faults.point("checkpoint.after_fsync")
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if points:
            _faults.point("checkpoint.after_rename")
        fsync_dir(path.parent)


def write_text(path: Path, text: str) -> None:
    """``text`` as the whole of ``path``, atomically (see :func:`atomic_write`)."""
    atomic_write(path, lambda f: f.write(text.encode()))


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def check_writable(path: Path) -> None:
    """Raises the OSFault that writing ``path`` would meet, before any work is done: an existing
    file is opened for appending (nothing changes), a new one is tried as an empty temp file
    beside it. Tried, not asked (``os.access``): root passes every mode check, not ``chattr +i``
    or a read-only mount."""
    path = Path(path)
    with writing(path):
        if path.exists():
            with open(path, "ab"):
                return
        probe = path.with_name(f".{path.name}.probe-{os.getpid()}")
        with open(probe, "wb"):
            pass
        probe.unlink()
