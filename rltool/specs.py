"""Specs: the shape and dtype of one entry, per batch element (no batch dims)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Spec:
    """Shape and dtype of one entry. ``n`` is set for categorical entries (number of values);
    ``low`` / ``high`` bound continuous actions."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    n: int | None = None
    low: tuple[float, ...] | None = field(default=None, compare=False)
    high: tuple[float, ...] | None = field(default=None, compare=False)

    @property
    def discrete(self) -> bool:
        return self.n is not None

    def zeros(self, *batch: int, device=None) -> torch.Tensor:
        return torch.zeros(*batch, *self.shape, dtype=self.dtype, device=device)


@dataclass(frozen=True)
class EnvSpecs:
    """What an env produces and accepts, per env."""

    observation: Spec
    action: Spec
    reward: Spec = Spec((1,), torch.float32)
