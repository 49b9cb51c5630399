"""The evaluation protocol, defined once: eval + exploit + sequential + no grad, frozen
normalisation (the eval env's ``training`` is False).

``episodes`` episodes over the env's ``num_envs`` envs, each env with a quota fixed in advance
(env i runs ``(episodes + i) // num_envs`` episodes, its first ones from ``reset(seed)``). Taking
whichever episodes finish first would favour short episodes; fixed quotas do not."""

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
def run_episodes(
    policy,
    env: VectorEnv,
    seed: int,
    episodes: int | None = None,
    max_steps: int = 100_000,
    trace: list | None = None,
) -> tuple[list[float], list[int]]:
    """Returns (returns, lengths) of the completed episodes, env by env in order. ``episodes``
    defaults to ``env.num_envs`` (one each). ``trace``, when given, receives each step's actions
    [num_envs]. Stops after ``max_steps`` vector steps even if some quotas are unmet."""
    n = env.num_envs
    episodes = n if episodes is None else episodes
    quota = torch.tensor([(episodes + i) // n for i in range(n)])
    got: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    collector = Collector(env, policy, n, seed=seed, bootstrap_values=False)
    with exploit(policy):
        for _ in range(max_steps):
            td = collector.collect()
            if trace is not None:
                trace.append(td[K.ACTION][0].clone())
            nxt = td[K.NEXT][0]
            done = nxt[K.DONE].reshape(n).cpu()
            if done.any():
                ret = nxt[K.EPISODE_RETURN].reshape(n).cpu()
                length = nxt[K.EPISODE_LENGTH].reshape(n).cpu()
                for i in done.nonzero().flatten().tolist():
                    if len(got[i]) < quota[i]:
                        got[i].append((ret[i].item(), int(length[i])))
            if all(len(g) >= q for g, q in zip(got, quota.tolist(), strict=True)):
                break
    flat = [x for g in got for x in g]
    return [r for r, _ in flat], [ln for _, ln in flat]


def summarize(returns: list[float], lengths: list[int]) -> dict[str, float]:
    """eval/return_mean, return_std (sample std; 0 for one episode), return_min, return_max,
    the same four for length, success_rate (the share of episodes whose return is positive:
    MiniGrid's success; for returns that can be positive on failure it means nothing) and
    episodes; NaN where no episode finished."""
    out: dict[str, float] = {}
    for name, xs in (("return", returns), ("length", lengths)):
        x = torch.tensor(xs, dtype=torch.float64)
        empty = x.numel() == 0
        out[f"eval/{name}_mean"] = math.nan if empty else x.mean().item()
        out[f"eval/{name}_std"] = math.nan if empty else (x.std().item() if len(x) > 1 else 0.0)
        out[f"eval/{name}_min"] = math.nan if empty else x.min().item()
        out[f"eval/{name}_max"] = math.nan if empty else x.max().item()
    out["eval/success_rate"] = sum(r > 0 for r in returns) / len(returns) if returns else math.nan
    out["eval/episodes"] = len(returns)
    return out


def evaluate(
    policy, env: VectorEnv, seed: int, episodes: int | None = None, max_steps: int = 100_000
) -> dict[str, float]:
    """:func:`run_episodes` summarized (see :func:`summarize`)."""
    return summarize(*run_episodes(policy, env, seed, episodes, max_steps))
