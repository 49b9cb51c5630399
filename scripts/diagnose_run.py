"""What a CartPole policy does at each of its checkpoints: greedy episodes, where the cart goes,
why episodes end, and how the critic's values compare with the returns that followed.

    python scripts/diagnose_run.py <run_dir> [--episodes 10] [--seed 0]

One row per checkpoint of the run (``checkpoint.keep`` large and ``checkpoint.every_frames``
small keep more of them): mean length; the share of episodes ended by the cart leaving the track
(|x| > 2.4), by the pole falling (|theta| > 0.21) or by the time limit; the mean and max |x|;
the mean x at the end (a drift to one side shows as a sign); the critic's mean value (V, or the
greedy Q of DQN) and the mean discounted return actually received (gamma of the run), and their
correlation over steps. A last block reads the run's metrics.csv, averaged over 10k-frame windows
beside the periodic evaluations: PPO's explained variance, approx KL, clip fraction and value loss,
or DQN's mean Q, mean target, mean |TD error| and epsilon.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from rltool import keys as K
from rltool.deploy.inference import LoadedPolicy, restore

X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * math.pi / 360


def value_of(out) -> float:
    """The critic's value of the state: V (PPO) or max over actions of Q (DQN)."""
    if K.STATE_VALUE in out:
        return float(out[K.STATE_VALUE])
    if K.ACTION_VALUE in out:
        return float(out[K.ACTION_VALUE].max())
    return math.nan


@torch.no_grad()
def episode(policy: LoadedPolicy, env, seed: int, gamma: float) -> dict:
    """One greedy episode: length, why it ended, |x| path, values and discounted returns."""
    obs, _ = env.reset(seed=seed)
    state = policy.initial_state(1)
    xs, values, rewards, end = [], [], [], "time limit"
    module = policy.module
    for _ in range(100_000):
        x = env.unwrapped.state[0]
        obs_t = policy._env._obs(np.asarray(obs)[None])
        inputs = {K.OBSERVATION: obs_t, **{k: state[k] for k in module.input_specs}}
        rnn = {k: state[k] for k in module.state_specs}
        out, nxt = module.step(inputs, rnn, torch.zeros(1, 1, dtype=torch.bool))
        values.append(value_of(out))
        action = policy._to_env(out[K.ACTION], True)
        state = {**state, **nxt}
        if K.PREV_ACTION in module.input_specs:
            state[K.PREV_ACTION] = out[K.ACTION]
        obs, reward, terminated, truncated, _ = env.step(action)
        xs.append(x)
        rewards.append(reward)
        if terminated:
            s = env.unwrapped.state
            end = "track" if abs(s[0]) > X_LIMIT else "pole"
        if terminated or truncated:
            break
    returns, g = [], 0.0
    for r in reversed(rewards):
        g = r + gamma * g
        returns.append(g)
    returns.reverse()
    return {"length": len(rewards), "end": end, "x": np.asarray(xs), "v": values, "g": returns}


def checkpoint_rows(run: Path, episodes: int, seed: int) -> None:
    names = sorted(p.stem for p in (run / "checkpoints").glob("ckpt-*.pt"))
    if (run / "checkpoints" / "best.pt").exists():  # the best periodic evaluation's policy
        names.append("best")
    print(
        f"{'checkpoint':<18} {'length':>7} {'track':>6} {'pole':>5} {'limit':>6} "
        f"{'mean|x|':>8} {'max|x|':>7} {'x end':>6} {'V mean':>7} {'G mean':>7} {'corr':>5}"
    )
    for name in names:
        restored = restore(run, name)
        policy = LoadedPolicy(restored)
        cfg = restored.config
        env = gym.make(cfg["env"]["id"], **cfg["env"]["kwargs"])
        eps = [episode(policy, env, seed + i, cfg["loss"]["gamma"]) for i in range(episodes)]
        env.close()
        ends = [e["end"] for e in eps]
        x = np.concatenate([e["x"] for e in eps])
        v = np.concatenate([e["v"] for e in eps])
        g = np.concatenate([e["g"] for e in eps])
        corr = np.corrcoef(v, g)[0, 1] if np.std(v) > 0 and np.std(g) > 0 else math.nan
        print(
            f"{name:<18} {np.mean([e['length'] for e in eps]):>7.1f} "
            f"{ends.count('track') / len(eps):>6.0%} {ends.count('pole') / len(eps):>5.0%} "
            f"{ends.count('time limit') / len(eps):>6.0%} {np.abs(x).mean():>8.2f} "
            f"{np.abs(x).max():>7.2f} {np.mean([e['x'][-1] for e in eps]):>6.2f} "
            f"{np.nanmean(v):>7.2f} {g.mean():>7.2f} {corr:>5.2f}"
        )


def metrics_rows(run: Path, window: int = 10_000) -> None:
    with (run / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    ppo = ("explained_variance", "approx_kl", "clip_fraction", "loss_value", "lr")
    dqn = ("q_mean", "target_mean", "td_error_abs_mean", "epsilon", "lr")
    cols = dqn if "q_mean" in rows[0] else ppo
    print(f"\n{'frames':>7} {'eval':>6} " + " ".join(f"{c[:12]:>12}" for c in cols))
    start = 0
    while start < int(rows[-1]["frames"]):
        part = [r for r in rows if start < int(r["frames"]) <= start + window]
        evals = [float(r["eval/return_mean"]) for r in part if r.get("eval/return_mean")]
        means = []
        for c in cols:
            xs = [float(r[c]) for r in part if r.get(c) not in (None, "")]
            means.append(np.nanmean(xs) if xs else math.nan)
        ev = f"{evals[-1]:>6.1f}" if evals else f"{'-':>6}"
        print(f"{start + window:>7} {ev} " + " ".join(f"{m:>12.4g}" for m in means))
        start += window


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("run", type=Path)
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(1)
    checkpoint_rows(a.run, a.episodes, a.seed)
    metrics_rows(a.run)


if __name__ == "__main__":
    main()
