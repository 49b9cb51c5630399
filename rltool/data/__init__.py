"""Data: minibatch samplers and the sequence context (PPO), the replay buffer (DQN)."""

from rltool.data.buffer import ReplayBuffer, check_plain_tensors, make_replay, replay_keys
from rltool.data.context import SequenceContext
from rltool.data.sampler import minibatches, resolve_sampler

__all__ = [
    "ReplayBuffer",
    "SequenceContext",
    "check_plain_tensors",
    "make_replay",
    "minibatches",
    "replay_keys",
    "resolve_sampler",
]
