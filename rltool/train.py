"""``rltool train``: the whole run on one page.

build -> loop (collect -> targets -> update -> log -> evaluate) -> final eval -> close.
The loss decides what an update computes (``UPDATES``): PPO runs GAE and epochs of minibatches
on the rollout; DQN stores it in the replay buffer and, after warm-up, samples ``utd_ratio``
batches from it. Everything else is one loop.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import Config
from rltool.data import ReplayBuffer, make_replay, minibatches, resolve_sampler
from rltool.envs import make_env
from rltool.evaluate import evaluate
from rltool.logging import make_loggers
from rltool.losses import DQNLoss, PPOLoss, add_gae, linear_schedule
from rltool.modules import make_policy


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Run:
    """Everything a training run holds."""

    cfg: Config
    env: object
    eval_env: object
    policy: torch.nn.Module
    loss: PPOLoss | DQNLoss
    collector: Collector
    optimizer: torch.optim.Optimizer
    sampler: str | None  # PPO's minibatch sampler
    buffer: ReplayBuffer | None = None  # DQN's replay


HEADS = {"ppo": ("actor", "critic"), "dqn": ("q",)}


def build(cfg: Config, run_dir: Path | None = None) -> Run:
    torch.set_num_threads(cfg.num_threads)
    seed_everything(cfg.seed)
    env = make_env(cfg.env, gamma=cfg.loss.gamma)
    eval_env = make_env(
        cfg.env, num_envs=cfg.eval.episodes, obs_norm=env.obs_norm, training=False, backend="sync"
    )
    policy = make_policy(cfg.policy, env.specs, heads=HEADS[cfg.loss.name])
    sampler, buffer = None, None
    if cfg.loss.name == "ppo":
        sampler = resolve_sampler(cfg.loss.sampler, recurrent=bool(policy.state_specs))
        loss = PPOLoss(
            policy,
            cfg.loss.clip_epsilon,
            cfg.loss.clip_value,
            cfg.loss.normalize_advantage,
            cfg.loss.entropy_coef,
            cfg.loss.value_coef,
            cfg.loss.reduction,
        )
    else:
        buffer = make_replay(cfg.buffer, cfg.loss.n_steps, env.num_envs, policy, cfg.seed, run_dir)
        loss = DQNLoss(
            policy,
            cfg.loss.gamma,
            cfg.loss.n_steps,
            cfg.loss.double_dqn,
            cfg.loss.loss_function,
            cfg.loss.reduction,
            cfg.loss.target_update,
            cfg.loss.target_update_every,
            cfg.loss.tau,
            burn_in=buffer.burn_in,
        )
        policy.epsilon = cfg.loss.eps_start
    collector = Collector(env, policy, cfg.collector.frames_per_batch, seed=cfg.seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.optim.lr, eps=cfg.optim.eps)
    return Run(cfg, env, eval_env, policy, loss, collector, optimizer, sampler, buffer)


def optimize(run: Run, terms, sums: dict[str, float]) -> None:
    """One gradient step on the sum of the ``loss_*`` terms; adds each scalar term to ``sums``."""
    total = sum(v for k, v in terms.items() if k.startswith("loss_"))
    run.optimizer.zero_grad(set_to_none=True)
    total.backward()
    if run.cfg.optim.max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(run.policy.parameters(), run.cfg.optim.max_grad_norm)
    run.optimizer.step()
    for k, v in terms.items():
        if v.dim() == 0:
            sums[k] = sums.get(k, 0.0) + v.detach().item()


def set_lr(run: Run, progress: float) -> dict[str, float]:
    """Linear annealing, anchored to total_frames."""
    lr = run.cfg.optim.lr * (1 - progress if run.cfg.optim.anneal_lr else 1)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return {"lr": lr}


def ppo_update(run: Run, batch, progress: float) -> dict[str, float]:
    """PPO: GAE, then epochs of minibatches; returns the mean of each logged term."""
    cfg = run.cfg
    lr = set_lr(run, progress)
    run.loss.clip_epsilon = cfg.loss.clip_epsilon * (1 - progress if cfg.loss.anneal_clip else 1)
    add_gae(batch, cfg.loss.gamma, cfg.loss.gae_lambda)
    sums: dict[str, float] = {}
    for _ in range(cfg.loss.epochs):
        for mb in minibatches(batch, cfg.loss.num_minibatches, run.sampler):
            optimize(run, run.loss(mb), sums)
    n = cfg.loss.epochs * cfg.loss.num_minibatches
    return {k: v / n for k, v in sums.items()} | lr


def dqn_update(run: Run, batch, progress: float) -> dict[str, float]:
    """DQN: store the rollout; after warm-up, ``utd_ratio`` steps on sampled batches, each
    followed by its priorities and the target update; then epsilon for the next rollout."""
    cfg, frames = run.cfg, round(progress * run.cfg.total_frames)
    lr = set_lr(run, progress)
    run.buffer.extend(batch)
    sums: dict[str, float] = {}
    n = cfg.loss.utd_ratio if frames >= cfg.loss.warmup_frames and run.buffer.can_sample() else 0
    for _ in range(n):
        sample = run.buffer.sample()
        terms = run.loss(sample)
        optimize(run, terms, sums)
        run.buffer.update_priorities(sample, terms["td_error"])
        run.loss.update_target()
    run.policy.epsilon = linear_schedule(
        cfg.loss.eps_start, cfg.loss.eps_end, cfg.loss.eps_frames, frames
    )
    return {k: v / n for k, v in sums.items()} | lr | {"epsilon": run.policy.epsilon}


UPDATES = {"ppo": ppo_update, "dqn": dqn_update}


def update(run: Run, batch, progress: float) -> dict[str, float]:
    """What the loss computes from a fresh rollout ([T, B]); the mean of each logged term."""
    return UPDATES[run.cfg.loss.name](run, batch, progress)


def episode_stats(batch) -> dict[str, float]:
    done = batch[K.NEXT, K.DONE].reshape(-1)
    returns = batch[K.NEXT, K.EPISODE_RETURN].reshape(-1)[done]
    return {
        "train/return_mean": returns.mean().item() if returns.numel() else float("nan"),
        "train/episodes": int(done.sum()),
    }


def train(cfg: Config, run_dir: Path) -> dict[str, float]:
    """Trains until ``total_frames``; writes metrics.csv and summary.json in ``run_dir``."""
    run = build(cfg, run_dir)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(cfg)))
    loggers = make_loggers(cfg.logger, run_dir, cfg.total_frames)
    frames, next_eval, start = 0, cfg.eval.every_frames, time.perf_counter()
    eval_seed = cfg.seed + cfg.eval.seed_offset
    try:
        while frames < cfg.total_frames:
            t0 = time.perf_counter()
            batch = run.collector.collect()
            frames += batch.numel()
            t1 = time.perf_counter()
            row = {
                "frames": frames,
                **episode_stats(batch),
                **update(run, batch, frames / cfg.total_frames),
            }
            t2 = time.perf_counter()
            if frames >= next_eval or frames >= cfg.total_frames:
                row |= evaluate(run.policy, run.eval_env, eval_seed)
                next_eval += cfg.eval.every_frames
            t3 = time.perf_counter()
            row |= {
                "time/collect_s": t1 - t0,
                "time/update_s": t2 - t1,
                "time/eval_s": t3 - t2,
                "time_s": t3 - start,
                "fps": frames / (t3 - start),
            }
            loggers.log(row)
    finally:
        loggers.close()
        run.collector.close()
        run.eval_env.close()
        if run.buffer is not None:  # a memmap made for this run only is scratch space
            run.buffer.close(delete=cfg.buffer.path is None)
    summary = {
        "frames": frames,
        "wall_time_s": time.perf_counter() - start,
        **{k: v for k, v in row.items() if k.startswith("eval/")},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
