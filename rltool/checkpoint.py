"""Minimal checkpoints, enough for ``rltool eval`` and ``rltool.load_policy``.

PLACEHOLDER for issue 6 (another branch builds the full version: optimizer, RNG, resume). What
``eval`` / ``load_policy`` rely on is only :func:`load_checkpoint`'s return value:
``{"policy": state_dict, "config": resolved config as plain containers, "obs_norm": state dict or
None, "frames": int}``, loaded with ``weights_only=True``. Files: ``<run>/checkpoints/<name>.pt``
and a ``latest`` pointer (a text file holding the name), both written atomically.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from rltool.errors import UserError

FORMAT_VERSION = 1


def _atomic_write(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        write(f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def save_checkpoint(run_dir, policy, obs_norm, config: dict, frames: int) -> Path:
    """Writes ``checkpoints/frames_<frames>.pt`` and points ``latest`` at it."""
    folder = Path(run_dir) / "checkpoints"
    folder.mkdir(parents=True, exist_ok=True)
    name = f"frames_{frames}"
    payload = {
        "format_version": FORMAT_VERSION,
        "frames": frames,
        "policy": policy.state_dict(),
        "obs_norm": obs_norm.state_dict() if obs_norm is not None else None,
        "config": config,
    }
    path = folder / f"{name}.pt"
    _atomic_write(path, lambda f: torch.save(payload, f))
    _atomic_write(folder / "latest", lambda f: f.write(name.encode()))
    return path


def load_checkpoint(run_dir, name: str | None = None) -> dict:
    """The checkpoint ``name`` (default: the latest) of the run in ``run_dir``."""
    run_dir = Path(run_dir)
    folder = run_dir / "checkpoints"
    if not run_dir.is_dir():
        raise UserError(f"run={run_dir}: no such folder; give a run folder (outputs/<date>/<time>)")
    if name is None:
        if not (folder / "latest").is_file():
            raise UserError(
                f"run={run_dir} holds no checkpoint (no checkpoints/latest): give the folder of "
                "a finished training run"
            )
        name = (folder / "latest").read_text().strip()
    path = folder / (name if name.endswith(".pt") else f"{name}.pt")
    if not path.is_file():
        have = sorted(p.stem for p in folder.glob("*.pt")) if folder.is_dir() else []
        raise UserError(
            f"checkpoint {name!r} not found in {folder}: choose one of {have or 'none'}"
        )
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - truncated, corrupt or unsafe (pickled objects)
        raise UserError(f"checkpoint {path} cannot be loaded safely ({type(e).__name__})") from None
    if not isinstance(ckpt, dict) or ckpt.get("format_version") != FORMAT_VERSION:
        raise UserError(f"checkpoint {path} has an unknown format: retrain with this rltool")
    return ckpt
