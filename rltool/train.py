"""``rltool train``: the whole run on one page.

build -> loop (collect -> targets -> update -> log -> evaluate) -> final eval -> close.
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
from rltool.checkpoint import save_checkpoint
from rltool.collectors import Collector
from rltool.config import Config
from rltool.data import minibatches, resolve_sampler
from rltool.envs import make_env
from rltool.evaluate import evaluate
from rltool.logging import make_loggers
from rltool.losses import PPOLoss, add_gae
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
    loss: PPOLoss
    collector: Collector
    optimizer: torch.optim.Optimizer
    sampler: str


def build(cfg: Config) -> Run:
    torch.set_num_threads(cfg.num_threads)
    seed_everything(cfg.seed)
    env = make_env(cfg.env, gamma=cfg.loss.gamma)
    eval_env = make_env(
        cfg.env, num_envs=cfg.eval.episodes, obs_norm=env.obs_norm, training=False, backend="sync"
    )
    policy = make_policy(cfg.policy, env.specs, heads=("actor", "critic"))
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
    collector = Collector(env, policy, cfg.collector.frames_per_batch, seed=cfg.seed)
    optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.optim.lr, eps=cfg.optim.eps)
    return Run(cfg, env, eval_env, policy, loss, collector, optimizer, sampler)


def update(run: Run, batch, progress: float) -> dict[str, float]:
    """PPO: GAE, then epochs of minibatches; returns the mean of each logged term."""
    cfg = run.cfg
    for group in run.optimizer.param_groups:  # linear annealing, anchored to total_frames
        group["lr"] = cfg.optim.lr * (1 - progress if cfg.optim.anneal_lr else 1)
    run.loss.clip_epsilon = cfg.loss.clip_epsilon * (1 - progress if cfg.loss.anneal_clip else 1)
    add_gae(batch, cfg.loss.gamma, cfg.loss.gae_lambda)
    sums: dict[str, float] = {}
    for _ in range(cfg.loss.epochs):
        for mb in minibatches(batch, cfg.loss.num_minibatches, run.sampler):
            terms = run.loss(mb)
            total = sum(v for k, v in terms.items() if k.startswith("loss_"))
            run.optimizer.zero_grad(set_to_none=True)
            total.backward()
            if cfg.optim.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(run.policy.parameters(), cfg.optim.max_grad_norm)
            run.optimizer.step()
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + v.detach().mean().item()
    n = cfg.loss.epochs * cfg.loss.num_minibatches
    return {k: v / n for k, v in sums.items()} | {"lr": run.optimizer.param_groups[0]["lr"]}


def episode_stats(batch) -> dict[str, float]:
    done = batch[K.NEXT, K.DONE].reshape(-1)
    returns = batch[K.NEXT, K.EPISODE_RETURN].reshape(-1)[done]
    return {
        "train/return_mean": returns.mean().item() if returns.numel() else float("nan"),
        "train/episodes": int(done.sum()),
    }


def train(cfg: Config, run_dir: Path) -> dict[str, float]:
    """Trains until ``total_frames``; writes metrics.csv and summary.json in ``run_dir``."""
    run = build(cfg)
    resolved = OmegaConf.structured(cfg)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    loggers = make_loggers(cfg.logger, run_dir, cfg.total_frames, OmegaConf.to_container(resolved))
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
    # HOOK(issue 6): the checkpoint branch saves periodically and on signals; this is the final one
    save_checkpoint(run_dir, run.policy, run.env.obs_norm, OmegaConf.to_container(resolved), frames)
    summary = {
        "frames": frames,
        "wall_time_s": time.perf_counter() - start,
        **{k: v for k, v in row.items() if k.startswith("eval/")},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
