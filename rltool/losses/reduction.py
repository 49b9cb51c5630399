"""The ``reduction`` every loss applies to its per-element terms, with an optional mask."""

from __future__ import annotations

import torch

REDUCTIONS = ("mean", "sum", "none")


def reduce(x: torch.Tensor, reduction: str, mask: torch.Tensor | None = None) -> torch.Tensor:
    """x: per element, e.g. [T, B]. mask: bool, same shape (or with a trailing 1).
    "none" keeps the shape with zeros where the mask is off; "mean" / "sum" count masked-in
    entries only."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}: choose one of {', '.join(REDUCTIONS)}")
    if mask is not None:
        mask = mask.reshape(x.shape)
        x = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    if reduction == "none":
        return x
    if reduction == "sum":
        return x.sum()
    count = mask.sum().clamp_min(1) if mask is not None else x.numel()
    return x.sum() / count
