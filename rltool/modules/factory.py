"""``make_policy``: a policy config and the env's specs -> a policy module."""

from __future__ import annotations

from rltool.config import PolicyConfig
from rltool.modules.policy import ActorCritic
from rltool.specs import EnvSpecs


def make_policy(
    cfg: PolicyConfig, specs: EnvSpecs, heads=("actor", "critic"), memory=None
) -> ActorCritic:
    """``heads``: what the algorithm trains (its ``AlgoSpec.heads``): ``actor`` and ``critic``,
    or ``q``. ``memory``: a user's memory module factory ``(input_size, state_prefix) -> module``
    in place of the memory of ``cfg.kind`` (a registered memory is simpler: ``rltool/memories.py``,
    chosen by ``policy.kind``, also from the command line)."""
    return ActorCritic(specs, cfg, heads, memory)
