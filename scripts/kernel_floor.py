"""The kernel floor of an image case: the CPU time that any PPO implementation training this
network with torch's CPU kernels must spend, whatever its own overhead.

Counted, per training run of ``cfg.total_frames`` frames at ``cfg``'s settings:
- per gradient step, the network's forward and backward on one minibatch ([T, B / minibatches])
  with the module calls alone: the encoder, one fused RNN call per layer over the whole sequence
  (no episode resets: the cheapest case), the MLPs and heads, a sum for the loss; then Adam's
  fused kernel (the fastest step torch has);
- per env step, the acting forward on [B] frames (encoder, RNN cells, heads; no sampling) and
  the env's own stepping (gymnasium's sync vector env, random actions, nothing else).
Left out: the loss's arithmetic, advantages, clipping, minibatch gathers, storing the rollout,
logging. So the floor is below what any implementation can reach: an implementation's frames per
CPU-second are at most ``cfg.total_frames / floor``, and its ratio to a reference at most that
over the reference's figure.

    python scripts/bench_ppo.py --case minigrid --seeds 3 --frames 8192 --floor
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch

from rltool import keys as K
from rltool.envs import make_env
from rltool.modules import make_policy


def _median_cpu(fn, reps: int) -> float:
    fn()  # warm-up (allocations, kernel selection)
    times = []
    for _ in range(reps):
        t = time.process_time()
        fn()
        times.append(time.process_time() - t)
    return float(np.median(times))


def _heads(policy, x: torch.Tensor, states) -> torch.Tensor:
    """Sum of the heads' outputs from features x: [T, b, F] through each torso's fused RNN
    layers (``states`` None), or [B, F] one bare cell step (the memory's own ``_cell``) from
    ``states`` (per torso, per layer: the state tuple)."""
    total = x.new_zeros(())
    for i, torso in enumerate(policy.torsos):
        h = torso.pre(x) if len(torso.pre) else x
        for j, layer in enumerate(torso.rnn.layers):
            h = layer(h)[0] if states is None else torso.rnn._cell(layer, h, states[i][j])[0]
        feat = torso.post(h)
        if i == 0:
            total = total + policy.dist(feat)[K.LOGITS].sum()
        if policy.has_critic and (i == 1 or len(policy.torsos) == 1):
            total = total + policy.critic(feat).sum()
    return total


def kernel_floor(cfg, env_factory, reps: int = 20, rounds: int = 3) -> dict[str, float]:
    """CPU seconds of the floor (above) for ``cfg`` (a recurrent policy with a categorical
    actor), the env stepped as ``env_factory()`` builds it. Returns its parts and ``frames_per_s``
    (the most frames per CPU-second an implementation on these kernels can reach)."""
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    env = make_env(cfg.env, num_envs=cfg.env.num_envs)
    try:
        policy = make_policy(cfg.policy, env.specs)
        B, fpb, loss = env.num_envs, cfg.collector.frames_per_batch, cfg.loss
        T, b = fpb // B, B // loss.num_minibatches
        obs_mb = env.specs.observation.zeros(T, b)
        obs_b = env.specs.observation.zeros(B)
    finally:
        env.close()
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.optim.lr, fused=True)

    def gradient_step():
        _heads(policy, policy.encode({"observation": obs_mb}), None).backward()

    states = [
        [tuple(torch.zeros(B, t.rnn.hidden_size) for _ in t.rnn.state_keys) for _ in t.rnn.layers]
        for t in policy.torsos
    ]

    @torch.no_grad()
    def act():
        _heads(policy, policy.encode({"observation": obs_b}), states)

    venv = gym.vector.SyncVectorEnv([env_factory] * B)
    venv.reset(seed=cfg.seed)
    rng = np.random.default_rng(cfg.seed)

    def env_step():
        venv.step(rng.integers(0, venv.single_action_space.n, B))

    # each part's fastest of `rounds` medians: a floor must not take in a slow moment
    parts = [(gradient_step, reps), (optimizer.step, reps), (act, 10 * reps), (env_step, 32)]
    grad_s, adam_s, act_s, env_s = (
        min(_median_cpu(fn, n) for _ in range(rounds)) for fn, n in parts
    )
    venv.close()
    steps = cfg.total_frames // fpb * loss.epochs * loss.num_minibatches
    total = steps * (grad_s + adam_s) + cfg.total_frames // B * (act_s + env_s)
    return {
        "gradient_step_ms": 1e3 * grad_s,
        "adam_ms": 1e3 * adam_s,
        "act_ms": 1e3 * act_s,
        "env_step_ms": 1e3 * env_s,
        "cpu_s": total,
        "frames_per_s": cfg.total_frames / total,
    }
