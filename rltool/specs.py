"""Specs: the shape and dtype of one entry, per batch element (no batch dims).

An observation is one :class:`Spec` (a flat Box, Discrete or MultiDiscrete space, or one image),
or a :class:`CompositeSpec` of named entries (a Dict or Tuple space), kept nested in the
TensorDict as ``("observation", <entry>)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from tensordict import TensorDict

# what an observation entry holds (how the policy encodes it)
VECTOR, INDEX, IMAGE = "vector", "index", "image"


@dataclass(frozen=True)
class Spec:
    """Shape and dtype of one entry. ``n`` is set for categorical entries (number of values);
    ``nvec`` for MultiDiscrete actions (values per factor); ``low`` / ``high`` bound continuous
    actions. Observation entries say what they hold in ``kind``: ``vector`` (floats, flattened),
    ``index`` (int64 index of ``n`` values, one-hot encoded) or ``image`` (uint8, ``layout``
    ``hwc`` / ``chw`` / ``hw``; ``symbolic`` when its values are codes, embedded per channel,
    not intensities, scaled to [0, 1])."""

    shape: tuple[int, ...]
    dtype: torch.dtype = torch.float32
    n: int | None = None
    low: tuple[float, ...] | None = field(default=None, compare=False)
    high: tuple[float, ...] | None = field(default=None, compare=False)
    nvec: tuple[int, ...] | None = None
    kind: str = VECTOR
    layout: str | None = None
    symbolic: bool = False  # an image of codes (MiniGrid's object / colour / state), not pixels

    @property
    def discrete(self) -> bool:
        return self.n is not None

    @property
    def multi_discrete(self) -> bool:
        return self.nvec is not None

    def zeros(self, *batch: int, device=None) -> torch.Tensor:
        return torch.zeros(*batch, *self.shape, dtype=self.dtype, device=device)


@dataclass(frozen=True)
class CompositeSpec:
    """Named observation entries, each a :class:`Spec`; zeros are a TensorDict."""

    entries: dict[str, Spec]

    def zeros(self, *batch: int, device=None) -> TensorDict:
        return TensorDict(
            {k: s.zeros(*batch, device=device) for k, s in self.entries.items()},
            batch_size=list(batch),
            device=device,
        )


@dataclass(frozen=True)
class EnvSpecs:
    """What an env produces and accepts, per env; ``action_mask``: [n] bool where the env gives
    action masks (``env.action_mask``), else None."""

    observation: Spec | CompositeSpec
    action: Spec
    reward: Spec = Spec((1,), torch.float32)
    action_mask: Spec | None = None
