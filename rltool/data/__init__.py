"""Data: minibatch samplers (PPO)."""

from rltool.data.sampler import minibatches, resolve_sampler

__all__ = ["minibatches", "resolve_sampler"]
