"""Sizes checked before allocation: what a rollout or a replay will take, against what the
machine has (memory: ``/proc/meminfo`` MemAvailable; a GPU: ``torch.cuda.mem_get_info``; a
memmap: the free space of its disk). A setting that cannot fit is a ConfigError naming it, before
a byte is allocated, instead of an allocator's crash or a machine swapping for minutes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from pathlib import Path

import torch

from rltool.errors import ConfigError
from rltool.specs import CompositeSpec, Spec

GB = 1e9


def spec_bytes(spec: Spec | CompositeSpec) -> int:
    """Bytes of one element of ``spec`` (all entries of a composite)."""
    if isinstance(spec, CompositeSpec):
        return sum(spec_bytes(s) for s in spec.entries.values())
    n = 1
    for d in spec.shape:
        n *= d
    return n * torch.empty((), dtype=spec.dtype).element_size()


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """``sum(numel * element_size)``: what the tensors take (meta tensors included)."""
    return sum(t.numel() * t.element_size() for t in tensors)


def available_memory() -> int | None:
    """Bytes of memory the system can give without swapping (Linux: MemAvailable); None where
    it cannot be told."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def available_on(device: torch.device) -> int | None:
    """Free bytes on ``device``: the system's memory for the CPU, the GPU's free memory for
    CUDA; None elsewhere (not checked)."""
    if device.type == "cpu":
        return available_memory()
    if device.type == "cuda" and torch.cuda.is_available():
        return torch.cuda.mem_get_info(device)[0]
    return None


def free_disk(path: str | Path) -> int | None:
    """Free bytes on the disk that holds ``path`` (its nearest existing folder)."""
    p = Path(path).resolve()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def check_fits(setting: str, need: int, count: str, where: str, have: int | None, fix: str) -> None:
    """Raise a ConfigError naming ``setting`` (``key=value``) when ``need`` bytes are more than
    ``have``. ``count``: what is stored, e.g. "1000 frames of 36 bytes"; ``where``: "memory for
    its replay"; ``fix``: what to do."""
    if have is None or need <= have:
        return
    raise ConfigError(
        f"{setting} needs ~{need / GB:.1f} GB of {where} ({count}); {have / GB:.1f} GB are "
        f"available: {fix}"
    )
