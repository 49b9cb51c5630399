"""The evaluation protocol, defined once: eval + exploit + sequential + no grad, the first episode
of each of the eval env's ``num_envs`` envs (separately seeded), mean return over them."""

from __future__ import annotations

import contextlib
import math

import torch

from rltool import keys as K
from rltool.collectors.collector import Collector
from rltool.envs.vector import VectorEnv


@contextlib.contextmanager
def exploit(policy):
    """Greedy actions (mode / argmax) inside the block."""
    before, policy.explore = policy.explore, False
    try:
        yield policy
    finally:
        policy.explore = before


@torch.no_grad()
def evaluate(policy, env: VectorEnv, seed: int, max_steps: int = 100_000) -> dict[str, float]:
    """Runs one episode per env of ``env`` from ``reset(seed)``. Returns eval/return_mean,
    return_std, return_min, return_max, length_mean."""
    n = env.num_envs
    returns = torch.full((n,), math.nan)
    lengths = torch.full((n,), math.nan)
    collector = Collector(env, policy, n, seed=seed, bootstrap_values=False)
    with exploit(policy):
        for _ in range(max_steps):
            nxt = collector.collect()[K.NEXT][0]
            first = nxt[K.DONE].reshape(n).cpu() & returns.isnan()
            returns[first] = nxt[K.EPISODE_RETURN].reshape(n).cpu()[first]
            lengths[first] = nxt[K.EPISODE_LENGTH].reshape(n).cpu()[first].float()
            if not returns.isnan().any():
                break
    done = returns[~returns.isnan()]
    return {
        "eval/return_mean": done.mean().item(),
        "eval/return_std": done.std(0).item() if done.numel() > 1 else 0.0,
        "eval/return_min": done.min().item(),
        "eval/return_max": done.max().item(),
        "eval/length_mean": lengths[~lengths.isnan()].mean().item(),
        "eval/episodes": int(done.numel()),
    }
