"""A refused command leaves a run folder as it found it: :class:`Before` records what the folder
held before the command touched it, and removes what the command added (Hydra creates the
folder, ``.hydra/`` and ``train.log`` before the config is checked)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from pathlib import Path

from rltool.errors import UserError
from rltool.runfolder import lock as runlock


@dataclasses.dataclass
class Before:
    """What a single run's folder held before this process touched it (:meth:`record`), so
    that a refused command can remove what it added (:meth:`tidy`)."""

    run_dir: Path | None = None
    entries: set[str] | None = None  # its top-level names; None: it did not exist
    top: Path | None = None  # the highest folder of its path that did not exist
    tidied: bool = False

    def record(self, run_dir: Path) -> None:
        if self.run_dir is not None:
            return
        self.run_dir = run_dir = Path(run_dir).resolve()
        if run_dir.is_dir():
            self.entries = {p.name for p in run_dir.iterdir()}
            return
        top = run_dir
        while not top.parent.exists():
            top = top.parent
        self.top = top

    def tidy(self) -> None:
        """Removes what this process added to the run folder (see the module docstring) and puts
        the lock file back as it was. Only while this process holds the folder's lock (never a
        folder another writer holds); once per command."""
        run_dir = self.run_dir
        if run_dir is None or self.tidied or not runlock.held(run_dir):
            return
        self.tidied = True
        if self.entries is None:
            shutil.rmtree(run_dir, ignore_errors=True)
            parent = run_dir.parent
            while self.top is not None and parent != self.top.parent:
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
                parent = parent.parent
            return
        for p in run_dir.iterdir():
            if p.name not in self.entries:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
        runlock.undo(run_dir)


def folder_refusal(key: str, path: Path | str) -> UserError | None:
    """Why the OS would refuse to make the folder ``path`` (the value of ``key``), as one line
    naming the fix, before anything is made; None when it can be made. Hydra makes its output
    folder before rltool sees the config, and its refusal would read as a bug (exit 70)."""
    if not str(path).strip():
        return UserError(f"{key}={str(path)!r} names no folder: give one")
    path = Path(path).absolute()
    name_max, path_max = _limits(path)
    for name in path.parts[1:]:
        if len(os.fsencode(name)) > name_max:
            return UserError(
                f"{key}={path}: the folder name {name[:24]}... is {len(os.fsencode(name))} "
                f"bytes, longer than this file system allows ({name_max}): choose a shorter name"
            )
    if len(os.fsencode(str(path))) >= path_max:
        return UserError(
            f"{key}={path}: the path is longer than this system allows ({path_max} bytes): "
            "choose a shorter one"
        )
    for folder in [*reversed(path.parents), path]:
        if folder.exists() and not folder.is_dir():
            return UserError(
                f"{key}={path}: {folder} is a file, not a folder: name another folder, or move "
                "the file away"
            )
    return None


def _limits(path: Path) -> tuple[int, int]:
    """(longest name, longest path) on the file system of ``path``'s nearest existing folder."""
    near = next((p for p in path.parents if _is_dir(p)), Path("/"))
    try:
        return os.pathconf(near, "PC_NAME_MAX"), os.pathconf(near, "PC_PATH_MAX")
    except (OSError, ValueError):
        return 255, 4096


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError:  # a name too long to ask about
        return False


def new_folders(path: Path) -> Path | None:
    """The highest folder of ``path`` that does not exist yet (None: it exists)."""
    path, top = Path(path).absolute(), None
    for folder in [path, *path.parents]:
        try:
            if folder.exists():
                break
        except OSError:
            pass
        top = folder
    return top


def remove_empty(top: Path | None) -> None:
    """Removes the empty folders under and at ``top`` (what a failed ``mkdir -p`` made)."""
    if top is None or not _is_dir(top):
        return
    for root, _, _ in os.walk(top, topdown=False):
        with contextlib.suppress(OSError):
            os.rmdir(root)
