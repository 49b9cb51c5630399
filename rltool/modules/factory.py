"""``make_policy``: a policy config and the env's specs -> a policy module."""

from __future__ import annotations

from rltool.config import PolicyConfig
from rltool.modules.policy import ActorCritic
from rltool.specs import EnvSpecs

# The heads each loss trains (training and restoring a run's checkpoint build the same policy)
HEADS = {"ppo": ("actor", "critic"), "dqn": ("q",)}


def make_policy(
    cfg: PolicyConfig, specs: EnvSpecs, heads=("actor", "critic"), memory=None
) -> ActorCritic:
    """``heads`` is what the loss needs: ("actor", "critic") for PPO, ("q",) for DQN.
    ``memory``: a user's memory module factory ``(input_size, state_prefix) -> module`` in
    place of the LSTM/GRU."""
    return ActorCritic(specs, cfg, heads, memory)
