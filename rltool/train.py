"""``rltool train``: the whole run on one page.

build -> loop (collect -> targets -> update -> log -> evaluate) -> final eval -> close.
The loss decides what an update computes (``UPDATES``): PPO runs GAE and epochs of minibatches
on the rollout; DQN stores it in the replay buffer and, after warm-up, samples ``utd_ratio``
batches from it. Everything else is one loop.
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
from rltool import layout
from rltool.collectors import Collector
from rltool.collectors.devices import DEVICE_KEYS, module_device, resolve_devices
from rltool.config import Config
from rltool.data import ReplayBuffer, make_replay, minibatches, resolve_sampler
from rltool.envs import make_env
from rltool.evaluation import evaluate
from rltool.guard import NonFiniteGuard
from rltool.logging import make_loggers
from rltool.losses import DQNLoss, PPOLoss, add_gae, linear_schedule
from rltool.modules import HEADS, make_policy
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
    loss: PPOLoss | DQNLoss
    collector: Collector
    optimizer: torch.optim.Optimizer
    sampler: str | None  # PPO's minibatch sampler
    guard: NonFiniteGuard
    buffer: ReplayBuffer | None = None  # DQN's replay


def build(cfg: Config, run_dir: Path | None = None) -> Run:
    devices = {k: getattr(cfg.collector, k) for k in DEVICE_KEYS}
    resolved = resolve_devices(**devices)  # a device this machine lacks fails here, before work
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
    policy = make_policy(cfg.policy, env.specs, heads=HEADS[cfg.loss.name])
    if resolved.policy is not None:  # before the loss copies it (DQN's target network)
        policy.to(resolved.policy)
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
    collector = Collector(env, policy, cfg.collector.frames_per_batch, seed=cfg.seed, **devices)
    # foreach: one kernel per op over all parameters, not a Python loop (CPU defaults to the loop)
    optimizer = torch.optim.Adam(
        policy.parameters(), lr=cfg.optim.lr, eps=cfg.optim.eps, foreach=True
    )
    guard = NonFiniteGuard(cfg.optim.max_nonfinite_steps)
    return Run(cfg, env, eval_env, policy, loss, collector, optimizer, sampler, guard, buffer)


def optimize(run: Run, terms, sums: dict[str, torch.Tensor]) -> None:
    """One gradient step on the sum of the ``loss_*`` terms (skipped by the guard when it is not
    finite); adds each scalar term to ``sums``."""
    total = sum(v for k, v in terms.items() if k.startswith("loss_"))
    run.guard.step(run.optimizer, total, run.policy.parameters(), run.cfg.optim.max_grad_norm)
    accumulate(terms, sums)


def accumulate(terms, sums: dict[str, torch.Tensor]) -> None:
    """Adds each scalar (0-dim) term of ``terms`` to ``sums``, detached."""
    for k, v in terms.items():
        if v.dim() == 0:
            sums[k] = sums.get(k, 0.0) + v.detach()


def means(run: Run, sums: dict[str, torch.Tensor], n: int) -> dict[str, float]:
    """The mean of each summed term (one sync, not one per term) and the skipped-step count."""
    values = torch.stack(list(sums.values())).div(max(n, 1)).tolist() if sums else []
    return dict(zip(sums, values, strict=True)) | {"nonfinite_steps": run.guard.take_skipped()}


def set_lr(run: Run, progress: float) -> dict[str, float]:
    """Linear annealing, anchored to total_frames."""
    lr = run.cfg.optim.lr * (1 - progress if run.cfg.optim.anneal_lr else 1)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return {"lr": lr}


def ppo_update(run: Run, batch, progress: float, frames: int) -> dict[str, float]:
    """PPO: GAE, then epochs of minibatches; returns the mean of each logged term."""
    cfg = run.cfg
    lr = set_lr(run, progress)
    run.loss.clip_epsilon = cfg.loss.clip_epsilon * (1 - progress if cfg.loss.anneal_clip else 1)
    add_gae(batch, cfg.loss.gamma, cfg.loss.gae_lambda)
    sums: dict[str, torch.Tensor] = {}
    steps, kl_limit = 0, cfg.loss.target_kl and 1.5 * cfg.loss.target_kl
    for epoch in range(cfg.loss.epochs):
        for mb in minibatches(batch, cfg.loss.num_minibatches, run.sampler):
            terms = run.loss(mb)
            if kl_limit and terms["approx_kl"].item() > kl_limit:  # too far from the rollout's
                accumulate(terms, sums)  # logged, not stepped
                return means(run, sums, steps + 1) | lr | {"epochs": epoch}
            optimize(run, terms, sums)
            steps += 1
    return means(run, sums, steps) | lr | {"epochs": cfg.loss.epochs}


def dqn_update(run: Run, batch, progress: float, frames: int) -> dict[str, float]:
    """DQN: store the rollout; after warm-up, ``utd_ratio`` steps on sampled batches, each
    followed by its priorities and the target update; then epsilon for the next rollout."""
    cfg = run.cfg
    lr = set_lr(run, progress)
    run.buffer.extend(batch)
    sums: dict[str, torch.Tensor] = {}
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
    return means(run, sums, n) | lr | {"epsilon": run.policy.epsilon}


UPDATES = {"ppo": ppo_update, "dqn": dqn_update}


def update(run: Run, batch, progress: float, frames: int) -> dict[str, float]:
    """What the loss computes from a fresh rollout ([T, B]) at ``progress`` of the schedule and
    ``frames`` collected so far; the mean of each logged term."""
    return UPDATES[run.cfg.loss.name](run, batch, progress, frames)


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
    run = build(cfg, run_dir)
    session = Session.start(run, run_dir)  # resume, or refuse a folder holding a checkpoint
    c = session.counters  # frames, next_eval, ... (saved in checkpoints)
    loss_device = module_device(run.policy)  # each batch moves there from the storing device
    devices = run.collector.devices | {"loss": str(loss_device)}
    (run_dir / layout.DEVICES).write_text(json.dumps(devices, indent=2))
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
                **update(run, batch, session.progress(), c.frames),
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
        if run.buffer is not None:  # a memmap made for this run only is scratch space
            run.buffer.close(delete=cfg.buffer.path is None)
    summary = {
        "frames": c.frames,
        "wall_time_s": session.elapsed(),
        **{k: v for k, v in row.items() if k.startswith("eval/")},
    }
    (run_dir / layout.SUMMARY).write_text(json.dumps(summary, indent=2))
    return summary
