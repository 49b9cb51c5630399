"""Checkpoint files: atomic writes, a ``latest`` pointer, the last N kept, safe loading.

Layout, in ``<run_dir>/checkpoints`` (the names: :mod:`rltool.layout`)::

    ckpt-000000012288.pt          torch.save of a dict of tensors and plain containers
    ckpt-000000012288.<name>/     a folder saver's files (e.g. a replay buffer), beside it
    latest                        the name of the newest complete checkpoint, one line

A write goes: folders (written to a temp folder, fsynced, renamed), then the file (temp file in the
same folder, flush, fsync, rename, fsync of the folder), then ``latest`` the same way, then pruning.
A kill at any instant leaves ``latest`` naming a complete checkpoint (the previous one until the new
pointer is in place). Loading uses ``torch.load(weights_only=True)`` only: a file holding pickled
Python objects is refused with one line and its code never runs.

Two protocols plug state in (see :func:`save` / :func:`load`):
- *stateful* objects: ``state_dict()`` -> tensors and plain containers, ``load_state_dict(d)``;
- *folder savers*: ``save(path)`` writes a folder (path does not exist yet), ``load(path)`` reads it
  back without unpickling.

Fault points (tests: ``RLTOOL_CHECKPOINT_KILL``, see :mod:`rltool._faults`): ``checkpoint.start``
and ``checkpoint.<step>`` at each step of :data:`~rltool._faults.CHECKPOINT_STEPS`.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch

from rltool import _faults, layout
from rltool.errors import UserError

FORMAT = "rltool-checkpoint"
VERSION = 1
POINTER = layout.LATEST
_NAME = layout.CHECKPOINT_PATTERN


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / layout.CHECKPOINTS


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for f in files:
            with open(Path(root) / f, "rb+") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(Path(root))


def atomic_write(path: Path, write: Callable, points: bool = False) -> None:
    """``write(file)`` into a temp file beside ``path``, flush, fsync, rename over ``path``."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    with open(tmp, "wb") as f:
        write(f)
        f.flush()
        if points:
            _faults.point("checkpoint.after_temp_write")
        os.fsync(f.fileno())
    if points:
        _faults.point("checkpoint.after_fsync")
    os.replace(tmp, path)
    if points:
        _faults.point("checkpoint.after_rename")
    _fsync_dir(path.parent)


def _checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoint files, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def _frames_of(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))


def save_file(path: Path, payload: dict) -> None:
    """Writes ``payload`` as one checkpoint file at ``path`` atomically, outside the numbered
    series (no ``latest``, no pruning): the best policy."""
    body = {"format": FORMAT, "version": VERSION, **payload, "folders": []}
    atomic_write(Path(path), lambda f: torch.save(body, f))


def save(
    directory: str | os.PathLike,
    frames: int,
    payload: dict,
    folders: dict | None = None,
    keep: int = 3,
) -> Path:
    """Writes checkpoint ``frames`` (payload: tensors and plain containers; ``folders``: name ->
    folder saver) atomically, points ``latest`` at it and keeps the newest ``keep``."""
    _faults.point("checkpoint.start")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(".*.tmp-*"):  # left by a killed write
        if stale.is_dir():
            shutil.rmtree(stale)
        else:
            stale.unlink()
    stem = layout.checkpoint_stem(frames)
    for name, saver in (folders or {}).items():
        final, tmp = directory / f"{stem}.{name}", directory / f".{stem}.{name}.tmp-{os.getpid()}"
        saver.save(tmp)
        _fsync_tree(tmp)
        if final.exists():  # an unreferenced leftover of a write that never got its pointer
            shutil.rmtree(final)
        os.replace(tmp, final)
    path = directory / f"{stem}.pt"
    body = {"format": FORMAT, "version": VERSION, **payload, "folders": sorted(folders or {})}
    atomic_write(path, lambda f: torch.save(body, f), points=True)
    _faults.point("checkpoint.before_pointer")
    atomic_write(directory / POINTER, lambda f: f.write(f"{path.name}\n".encode()))
    _prune(directory, path, keep)
    return path


def _prune(directory: Path, current: Path, keep: int) -> None:
    """Keeps the newest ``keep`` up to ``current``; drops any newer leftover of an abandoned
    future (a resumed run rewrites that stretch)."""
    frames = _frames_of(current)
    files = _checkpoints(directory)
    older = [p for p in files if _frames_of(p) <= frames]
    doomed = older[:-keep] + [p for p in files if _frames_of(p) > frames]
    for p in doomed:
        for extra in directory.glob(f"{p.stem}.*"):
            if extra.is_dir():
                shutil.rmtree(extra)
        p.unlink()


def latest(directory: str | os.PathLike) -> Path | None:
    """The checkpoint ``latest`` names (or, without a pointer, the newest complete file)."""
    directory = Path(directory)
    pointer = directory / POINTER
    if pointer.is_file():
        name = pointer.read_text().strip()
        if not _NAME.match(name):
            raise UserError(
                f"{pointer} is corrupted (it names {name!r}): write the name of a checkpoint "
                f"file of {directory} into it"
            )
        return directory / name
    files = _checkpoints(directory)
    return files[-1] if files else None


def load(path: str | os.PathLike) -> dict:
    """Loads a checkpoint file safely; every problem is a one-line UserError."""
    path = Path(path)
    if not path.is_file():
        raise UserError(
            f"checkpoint {path} is missing (the 'latest' pointer names it): restore it, or put "
            "the name of another checkpoint of that folder into 'latest'"
        )
    if not zipfile.is_zipfile(path):
        raise UserError(
            f"checkpoint {path} is truncated or not an rltool checkpoint (not a torch zip "
            "archive): restore it, or put the name of an older checkpoint into 'latest'"
        )
    try:
        body = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - each failure becomes one line
        unsafe = re.search(r"GLOBAL (\S+)", str(e))
        if unsafe:
            raise UserError(
                f"checkpoint {path} holds a pickled Python object ({unsafe.group(1)}) and was "
                "refused unread: rltool loads tensors and plain containers only, and never runs "
                "code from a file; use a checkpoint written by rltool"
            ) from None
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(
            f"checkpoint {path} is truncated or corrupted ({first}): restore it, or put the "
            "name of an older checkpoint into 'latest'"
        ) from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise UserError(f"{path} is not an rltool checkpoint: resume from an rltool run folder")
    if body.get("version") != VERSION:
        raise UserError(
            f"checkpoint {path} has format version {body.get('version')!r}; this rltool reads "
            f"version {VERSION}: continue it with the rltool version that wrote it, or start a "
            "new run"
        )
    for name in body["folders"]:
        if not (path.parent / f"{path.stem}.{name}").is_dir():
            raise UserError(
                f"checkpoint {path} is incomplete: its folder {path.stem}.{name} is missing; "
                "restore it, or put the name of an older checkpoint into 'latest'"
            )
    return body


def load_folders(path: Path, folders: dict) -> None:
    """Reads each folder saver's folder beside checkpoint ``path``."""
    for name, saver in folders.items():
        saver.load(path.parent / f"{path.stem}.{name}")
