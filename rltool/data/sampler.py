"""Minibatches of an on-policy rollout [T, B] (PPO).

``sequences``: whole env columns with their stored initial states, [T, B/n] each — what a recurrent
policy needs. ``steps``: shuffled single steps, [T*B/n] each — for stateless policies only.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from tensordict import TensorDictBase

from rltool.errors import ConfigError


def resolve_sampler(sampler: str, recurrent: bool) -> str:
    """auto -> sequences for a recurrent policy, else steps; steps + recurrent is refused."""
    if sampler == "auto":
        return "sequences" if recurrent else "steps"
    if sampler == "steps" and recurrent:
        raise ConfigError(
            "loss.sampler=steps shuffles single steps, which cannot carry a recurrent "
            "state: use loss.sampler=sequences (or auto) with policy=lstm/gru"
        )
    return sampler


def minibatches(
    batch: TensorDictBase,
    num_minibatches: int,
    sampler: str,
    generator: torch.Generator | None = None,
) -> Iterator[TensorDictBase]:
    """Yields ``num_minibatches`` disjoint minibatches covering ``batch`` once, in random order."""
    if num_minibatches == 1:  # the whole batch: order does not change a mean, skip the copy
        yield batch
    elif sampler == "sequences":
        n = batch.shape[1]
        if num_minibatches > n:
            raise ConfigError(
                f"loss.num_minibatches={num_minibatches} exceeds the {n} env columns "
                "a sequence sampler can split: lower it or raise env.num_envs"
            )
        perm = torch.randperm(n, generator=generator)
        for idx in perm.chunk(num_minibatches):
            yield batch[:, idx.to(batch.device)]
    else:
        flat = batch.reshape(-1)
        perm = torch.randperm(flat.shape[0], generator=generator)
        for idx in perm.chunk(num_minibatches):
            yield flat[idx.to(batch.device)]
