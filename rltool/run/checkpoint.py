"""Checkpoint files: atomic writes, a ``latest`` pointer, the last N kept, safe loading.

Layout, in ``<run_dir>/checkpoints`` (the names: :mod:`rltool.runfolder.layout`)::

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

Fault points (tests: ``RLTOOL_CHECKPOINT_KILL``, see :mod:`rltool.testing.faults`):
``checkpoint.start`` and ``checkpoint.<step>`` at each step of
:data:`~rltool.testing.faults.CHECKPOINT_STEPS`.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from pathlib import Path

import torch

from rltool.config.saved import is_safe
from rltool.config.store import flatten
from rltool.errors import UserError
from rltool.runfolder import layout
from rltool.runfolder.writes import atomic_write, fsync_dir, writing
from rltool.testing import faults as _faults

FORMAT = "rltool-checkpoint"
VERSION = 1
POINTER = layout.LATEST
_NAME = layout.CHECKPOINT_PATTERN


def checkpoint_dir(run_dir: str | os.PathLike) -> Path:
    return Path(run_dir) / layout.CHECKPOINTS


def _fsync_tree(path: Path) -> None:
    for root, _, files in os.walk(path):
        for f in files:
            with open(Path(root) / f, "rb+") as fh:
                os.fsync(fh.fileno())
        fsync_dir(Path(root))


def _checkpoints(directory: Path) -> list[Path]:
    """Complete checkpoint files, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if _NAME.match(p.name))


def _frames_of(path: Path) -> int:
    return int(_NAME.match(path.name).group(1))


def _body(payload: dict, folders: list[str]) -> dict:
    """A checkpoint file's dict: the format and its version, the rltool version that wrote it
    (``rltool_version``, a string), the payload and the names of its side folders."""
    from rltool import __version__

    head = {"format": FORMAT, "version": VERSION, "rltool_version": __version__}
    return {**head, **payload, "folders": folders}


def save_file(path: Path, payload: dict) -> None:
    """Writes ``payload`` as one checkpoint file at ``path`` atomically, outside the numbered
    series (no ``latest``, no pruning): the best policy."""
    body = _body(payload, [])
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
    with writing(directory):
        directory.mkdir(parents=True, exist_ok=True)
        for stale in directory.glob(".*.tmp-*"):  # left by a killed write
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
    stem = layout.checkpoint_stem(frames)
    for name, saver in (folders or {}).items():
        final, tmp = directory / f"{stem}.{name}", directory / f".{stem}.{name}.tmp-{os.getpid()}"
        with writing(final):
            try:
                saver.save(tmp)
                _fsync_tree(tmp)
            except BaseException:  # a full disk: no half folder left behind
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            if final.exists():  # an unreferenced leftover of a write that never got its pointer
                shutil.rmtree(final)
            os.replace(tmp, final)
    path = directory / f"{stem}.pt"
    body = _body(payload, sorted(folders or {}))
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


def check_config(saved: dict, current: dict, path: Path, fix: str) -> None:
    """Refuses, in one line ending with ``fix``, checkpoint ``path`` whose config (``saved``)
    differs from the run's (``current``) in a key that must not change (env, spaces, policy,
    algorithm: any key but :data:`~rltool.config.saved.SAFE_KEYS`), naming the first."""
    old, new = flatten(saved), flatten(current)
    diffs = [k for k in old if k in new and not is_safe(k) and old[k] != new[k]]
    if diffs:
        k = diffs[0]
        more = f" (and {len(diffs) - 1} more)" if len(diffs) > 1 else ""
        raise UserError(
            f"checkpoint {path} was written with {k}={old[k]!r} but the run's config says "
            f"{new[k]!r}{more}: {fix}"
        )


def check_parts(path: Path, saved: dict, own: dict) -> None:
    """Refuses, in one line, checkpoint ``path`` whose state parts (``saved``: name -> state
    dict) differ from the run's own (``own``) in layout: the first nested key, tensor shape or
    dtype that differs. Values are not compared, nor an empty container or None of the run's (a
    fresh optimizer holds no moments yet, an env without state saves None)."""
    for name in [*own, *(k for k in saved if k not in own)]:
        if name not in saved or name not in own:
            where = "this run has no" if name in saved else "the checkpoint has no"
            diff = f"{where} part {name}"
        else:
            diff = _difference(saved[name], own[name], "")
            diff = diff and f"checkpoint part {name}: {diff}"
        if diff:
            raise UserError(
                f"{diff} (in {path}): the checkpoint was written by another model, config or "
                "rltool version; resume it with those, or start a new run"
            )


def _difference(saved, own, at: str) -> str | None:
    """The first difference of layout between ``saved`` and ``own`` (at key path ``at``)."""
    if own is None or saved is None or (isinstance(own, dict | list | tuple) and not own):
        return None
    name = at or "the part"
    if _kind(saved) != _kind(own):
        return f"{name} is {_kind(saved)}, this run's {_kind(own)}"
    if isinstance(own, torch.Tensor):
        if saved.shape != own.shape:
            return f"{name} has shape {list(saved.shape)}, this run's {list(own.shape)}"
        if saved.dtype != own.dtype:
            return f"{name} has dtype {saved.dtype}, this run's {own.dtype}"
        return None
    if isinstance(own, dict):
        missing = [k for k in own if k not in saved]
        if missing:
            return f"{_at(at, missing[0])} is missing (this run has it)"
        extra = [k for k in saved if k not in own]
        if extra:
            return f"{_at(at, extra[0])} is not in this run"
        pairs = ((saved[k], own[k], _at(at, k)) for k in own)
    elif isinstance(own, list | tuple):
        if len(saved) != len(own):
            return f"{name} has {len(saved)} entries, this run's {len(own)}"
        pairs = ((a, b, _at(at, i)) for i, (a, b) in enumerate(zip(saved, own, strict=True)))
    else:
        return None  # a plain value: the run's own may differ (a count, a learning rate)
    return next(filter(None, (_difference(*p) for p in pairs)), None)


def _at(at: str, key) -> str:
    return f"{at}.{key}" if at else str(key)


def _kind(x) -> str:
    if isinstance(x, torch.Tensor):
        return "a tensor"
    if isinstance(x, dict):
        return "a dict"
    return "a list" if isinstance(x, list | tuple) else "a value"


def load_folders(path: Path, folders: dict) -> None:
    """Reads each folder saver's folder beside checkpoint ``path``."""
    for name, saver in folders.items():
        saver.load(path.parent / f"{path.stem}.{name}")
