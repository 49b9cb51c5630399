"""The evaluation protocol, defined once: eval + exploit + sequential + no grad, frozen
normalisation (the eval env's ``training`` is False).

``episodes`` episodes over the env's ``num_envs`` envs, each env with a quota fixed in advance
(env i runs ``(episodes + i) // num_envs`` episodes, its first ones from ``reset(seed)``). Taking
whichever episodes finish first would favour short episodes; fixed quotas do not. An episode is
cut at ``eval.max_episode_steps`` (null: the env's time limit, else DEFAULT_EPISODE_STEPS) as a
time limit would cut it, so that an evaluation of an env whose episodes never end ends; the cut
ones are counted (``eval/episodes_cut``) and a warning says so once."""

from __future__ import annotations

import contextlib
import math
from typing import NamedTuple

import torch

from rltool import keys as K
from rltool.collectors.collector import Collector
from rltool.envs.vector import VectorEnv
from rltool.errors import warn


@contextlib.contextmanager
def exploit(policy):
    """Greedy actions (mode / argmax) inside the block."""
    before, policy.explore = policy.explore, False
    try:
        yield policy
    finally:
        policy.explore = before


# an evaluation episode's cap (eval.max_episode_steps=null) where the env has no time limit of its
# own: an endless env's evaluation then ends after this many vector steps per episode of a quota,
# and every bounded benchmark rltool ships (time limits up to 1,000 steps; Atari's are 27,000 but
# its episodes end far earlier) is never cut
DEFAULT_EPISODE_STEPS = 10_000


class Played(NamedTuple):
    """Episodes played by :func:`play`, env by env in order; ``cut``: how many of them were
    stopped at the episode cap (their return and length so far are included)."""

    returns: list[float]
    lengths: list[int]
    cut: int


def episode_cap(env: VectorEnv, max_episode_steps: int | None) -> int:
    """``eval.max_episode_steps``, or null: the env's time limit, else DEFAULT_EPISODE_STEPS."""
    if max_episode_steps is not None:
        return max_episode_steps
    return getattr(env, "time_limit", None) or DEFAULT_EPISODE_STEPS


@torch.no_grad()
def play(
    policy,
    env: VectorEnv,
    seed: int,
    episodes: int | None = None,
    max_episode_steps: int | None = None,
    max_steps: int = 100_000,
    trace: list | None = None,
) -> Played:
    """Plays each env's quota of episodes (``episodes`` defaults to ``env.num_envs``). An episode
    that reaches the cap (:func:`episode_cap`) is cut as a time limit would: counted with its
    return so far, the env reset to a new one (a backend that cannot reset one env: its quota
    ends there), and a one-time warning. ``trace``, when given, receives each step's actions
    [num_envs]. Stops after ``max_steps`` vector steps even if some quotas are unmet."""
    n, cap = env.num_envs, episode_cap(env, max_episode_steps)
    episodes = n if episodes is None else episodes
    quota = [(episodes + i) // n for i in range(n)]
    got: list[list[tuple[float, int]]] = [[] for _ in range(n)]
    cut = 0
    collector = Collector(env, policy, n, seed=seed, bootstrap_values=False)
    with exploit(policy):
        for _ in range(min(max_steps, cap * max(quota, default=0))):
            td = collector.collect()
            if trace is not None:
                trace.append(td[K.ACTION][0].clone())
            nxt = td[K.NEXT][0]
            done = nxt[K.DONE].reshape(n).cpu()
            ret = nxt[K.EPISODE_RETURN].reshape(n).cpu()
            length = nxt[K.EPISODE_LENGTH].reshape(n).cpu()
            wanted = torch.tensor([len(g) < q for g, q in zip(got, quota, strict=True)])
            over = ~done & (length >= cap) & wanted
            for i in (done & wanted | over).nonzero().flatten().tolist():
                got[i].append((ret[i].item(), int(length[i])))
            if over.any():
                cut += int(over.sum())
                _cut(env, collector, over, quota, got, cap)
            if all(len(g) >= q for g, q in zip(got, quota, strict=True)):
                break
    flat = [x for g in got for x in g]
    return Played([r for r, _ in flat], [ln for _, ln in flat], cut)


def _cut(env: VectorEnv, collector: Collector, over: torch.Tensor, quota, got, cap) -> None:
    """New episodes where ``over`` [B]; where the env cannot reset alone, its quota ends."""
    warn(
        f"evaluation episodes of {env.guard.env_id} reached eval.max_episode_steps={cap} and "
        "were cut; raise it or give the env a time limit"
    )
    obs = env.reset_where(over.numpy())
    if obs is not None:
        collector.restart(over.to(collector.env_device), obs)
        return
    for i in over.nonzero().flatten().tolist():
        quota[i] = len(got[i])


def run_episodes(
    policy,
    env: VectorEnv,
    seed: int,
    episodes: int | None = None,
    max_steps: int = 100_000,
    trace: list | None = None,
    max_episode_steps: int | None = None,
) -> tuple[list[float], list[int]]:
    """(returns, lengths) of :func:`play`'s episodes."""
    played = play(policy, env, seed, episodes, max_episode_steps, max_steps, trace)
    return played.returns, played.lengths


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
    policy,
    env: VectorEnv,
    seed: int,
    episodes: int | None = None,
    max_episode_steps: int | None = None,
    *,
    max_steps: int = 100_000,
) -> dict[str, float]:
    """:func:`play` summarized (see :func:`summarize`), plus ``eval/episodes_cut``: the episodes
    stopped at ``eval.max_episode_steps`` (:func:`episode_cap`)."""
    played = play(policy, env, seed, episodes, max_episode_steps, max_steps)
    return summarize(played.returns, played.lengths) | {"eval/episodes_cut": played.cut}
