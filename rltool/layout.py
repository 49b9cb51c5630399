"""The run folder's layout: the name of every file and folder rltool reads or writes there."""

from __future__ import annotations

from pathlib import Path


def has_checkpoint(run_dir: Path) -> bool:
    ck = run_dir / "checkpoints"
    return ck.is_dir() and any(
        p.name == "latest" or (p.name.startswith("ckpt-") and p.suffix == ".pt")
        for p in ck.iterdir()
    )
