"""``rltool train``: the whole run on one page.

build -> loop (collect -> targets -> update -> log -> evaluate) -> final eval -> close.
"""

from __future__ import annotations

import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rltool import keys as K
from rltool.collectors import Collector
from rltool.collectors.devices import DEVICE_KEYS, module_device, resolve_devices
from rltool.config import Config
from rltool.data import minibatches, resolve_sampler
from rltool.envs import make_env
from rltool.evaluate import evaluate
from rltool.guard import NonFiniteGuard
from rltool.logging import make_loggers
from rltool.losses import PPOLoss, add_gae
from rltool.modules import make_policy
from rltool.session import Session


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
    guard: NonFiniteGuard


def build(cfg: Config) -> Run:
    c = cfg.collector
    devices = {k: getattr(c, k) for k in DEVICE_KEYS}
    resolve_devices(**devices)  # a device this machine lacks fails here, before any work
    torch.set_num_threads(cfg.num_threads)
    seed_everything(cfg.seed)
    env = make_env(cfg.env, gamma=cfg.loss.gamma)
    eval_backend = "envpool" if cfg.env.backend == "envpool" else "sync"  # no worker processes
    eval_env = make_env(
        cfg.env,
        num_envs=cfg.eval.episodes,
        obs_norm=env.obs_norm,
        training=False,
        backend=eval_backend,
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
    collector = Collector(env, policy, c.frames_per_batch, seed=cfg.seed, **devices)
    # foreach: one kernel per op over all parameters, not a Python loop (CPU defaults to the loop)
    optimizer = torch.optim.Adam(
        policy.parameters(), lr=cfg.optim.lr, eps=cfg.optim.eps, foreach=True
    )
    guard = NonFiniteGuard(cfg.optim.max_nonfinite_steps)
    return Run(cfg, env, eval_env, policy, loss, collector, optimizer, sampler, guard)


def update(run: Run, batch, progress: float) -> dict[str, float]:
    """PPO: GAE, then epochs of minibatches; returns the mean of each logged term."""
    cfg = run.cfg
    for group in run.optimizer.param_groups:  # linear annealing, anchored to total_frames
        group["lr"] = cfg.optim.lr * (1 - progress if cfg.optim.anneal_lr else 1)
    run.loss.clip_epsilon = cfg.loss.clip_epsilon * (1 - progress if cfg.loss.anneal_clip else 1)
    add_gae(batch, cfg.loss.gamma, cfg.loss.gae_lambda)
    sums: dict[str, torch.Tensor] = {}
    for _ in range(cfg.loss.epochs):
        for mb in minibatches(batch, cfg.loss.num_minibatches, run.sampler):
            terms = run.loss(mb)
            total = sum(v for k, v in terms.items() if k.startswith("loss_"))
            run.guard.step(run.optimizer, total, run.policy.parameters(), cfg.optim.max_grad_norm)
            for k, v in terms.items():
                sums[k] = sums.get(k, 0.0) + v.detach().mean()
    n = cfg.loss.epochs * cfg.loss.num_minibatches
    means = torch.stack(list(sums.values())).div(n).tolist()  # one sync, not one per term
    extra = {"lr": run.optimizer.param_groups[0]["lr"], "nonfinite_steps": run.guard.take_skipped()}
    return dict(zip(sums, means, strict=True)) | extra


def episode_stats(batch) -> dict[str, float]:
    done = batch[K.NEXT, K.DONE].reshape(-1)
    returns = batch[K.NEXT, K.EPISODE_RETURN].reshape(-1)[done]
    return {
        "train/return_mean": returns.mean().item() if returns.numel() else float("nan"),
        "train/episodes": int(done.sum()),
    }


def train(cfg: Config, run_dir: Path) -> dict[str, float]:
    """Trains until ``total_frames``; writes metrics.csv, checkpoints and summary.json in
    ``run_dir``. Continues ``cfg.resume``'s latest checkpoint when set."""
    run = build(cfg)
    session = Session.start(run, run_dir)  # resume, or refuse a folder holding a checkpoint
    c = session.counters  # frames, next_eval, ... (saved in checkpoints)
    loss_device = module_device(run.policy)  # each batch moves there from the storing device
    devices = run.collector.devices | {"loss": str(loss_device)}
    (run_dir / "devices.json").write_text(json.dumps(devices, indent=2))
    print("devices: " + ", ".join(f"{k} {v}" for k, v in devices.items()), file=sys.stderr)
    loggers = make_loggers(cfg.logger, run_dir, cfg.total_frames, config=cfg)
    eval_seed = cfg.seed + cfg.eval.seed_offset
    try:
        while c.frames < cfg.total_frames:
            t0 = time.perf_counter()
            batch = run.collector.collect()
            c.frames += batch.numel()
            if batch.device != loss_device:
                batch = batch.to(loss_device)
            t1 = time.perf_counter()
            row = {
                "frames": c.frames,
                **episode_stats(batch),
                **update(run, batch, session.progress()),
            }
            t2 = time.perf_counter()
            if c.frames >= c.next_eval or c.frames >= cfg.total_frames:
                row |= evaluate(run.policy, run.eval_env, eval_seed)
                c.next_eval += cfg.eval.every_frames
            t3 = time.perf_counter()
            row |= {
                "time/collect_s": t1 - t0,
                "time/update_s": t2 - t1,
                "time/eval_s": t3 - t2,
                "time_s": session.elapsed(),
                "fps": c.frames / session.elapsed(),
            }
            loggers.log(row)
            session.end_iteration(row)  # checkpoint when due, at the end, or on a signal
    finally:
        session.close()  # the signal handlers
        loggers.close()
        run.collector.close()
        run.eval_env.close()
    summary = {
        "frames": c.frames,
        "wall_time_s": session.elapsed(),
        **{k: v for k, v in row.items() if k.startswith("eval/")},
    }
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
