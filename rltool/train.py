"""``rltool train``: the whole run on one page.

build -> resume -> loop (collect -> update: targets and gradient steps -> log -> evaluate ->
checkpoint) -> close. What an update computes (returns, minibatches, replay) is the algorithm's,
chosen by ``loss=<name>`` from the registry (``rltool/algos/<name>/algorithm.py``); every gradient
step it takes is :func:`gradient_step`, below.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from rltool import algos
from rltool import keys as K
from rltool.algos.base import Algorithm
from rltool.collectors import Collector
from rltool.collectors.devices import DEVICE_KEYS, module_device, resolve_devices
from rltool.config import Config
from rltool.distributed.ranks import SOLO, Solo
from rltool.envs import VectorEnv, make_env
from rltool.errors import ConfigError
from rltool.logging import Loggers, check_packages, make_loggers
from rltool.modules import ActorCritic, make_policy
from rltool.optim.adam import FlatAdam
from rltool.optim.guard import NonFiniteGuard
from rltool.run import footprint
from rltool.run.compile import compile_run
from rltool.run.evaluation import evaluate
from rltool.run.hooks import Hooks
from rltool.run.session import Session
from rltool.runfolder import layout
from rltool.runfolder.writes import write_text

_log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class Run:
    """Everything a training run holds."""

    cfg: Config
    env: VectorEnv
    eval_env: VectorEnv
    policy: ActorCritic
    algo: Algorithm  # the loss, and what it needs besides the policy (a sampler, a replay)
    collector: Collector
    optimizer: torch.optim.Optimizer
    guard: NonFiniteGuard
    # called with the parameters after backward, before clipping (where gradients are averaged
    # across processes)
    grad_hook: Callable[[list[torch.nn.Parameter]], None] | None = None
    comm: Solo = SOLO  # this process's rank among the run's processes (rltool/distributed/ranks.py)


def build(cfg: Config, run_dir: Path | None = None, comm: Solo = SOLO) -> Run:
    """The run's parts. Every rank builds the same policy (seed ``cfg.seed``); rank r's envs are
    seeded from ``cfg.seed + r * env.num_envs`` (together: the seeds of one process with all the
    envs) and its random draws after building from that seed too."""
    devices = {k: getattr(cfg.collector, k) for k in DEVICE_KEYS}
    resolved = resolve_devices(**devices)  # a device this machine lacks fails here, before work
    torch.set_num_threads(cfg.num_threads)
    seed_everything(cfg.seed)
    env = make_env(cfg.env, gamma=cfg.loss.gamma)
    try:  # before anything is built on the observations (rltool/run/footprint.py)
        footprint.check(cfg, env.specs.observation)
    except ConfigError:
        env.close()
        raise
    eval_backend = "envpool" if cfg.env.backend == "envpool" else "sync"  # no worker processes
    eval_env = make_env(
        cfg.env,
        num_envs=cfg.eval.episodes,
        obs_norm=env.obs_norm,
        training=False,
        backend=eval_backend,
    )
    spec = algos.get(cfg.loss.name)
    policy = make_policy(cfg.policy, env.specs, heads=spec.heads)
    if resolved.policy is not None:  # before the algorithm copies it (a target network)
        policy.to(resolved.policy)
    algo = spec.load()(cfg, env, policy, run_dir)
    own_seed = cfg.seed + comm.rank * cfg.env.num_envs
    collector = Collector(env, policy, cfg.collector.frames_per_batch, seed=own_seed, **devices)
    optimizer = make_optimizer(cfg, policy)
    guard = NonFiniteGuard(cfg.optim.max_nonfinite_steps)
    if comm.rank:
        seed_everything(own_seed)
    run = Run(cfg, env, eval_env, policy, algo, collector, optimizer, guard, comm.grad_hook, comm)
    if cfg.compile:  # in place: compiled at the first call, in the run's time
        compile_run(run)
    return run


def make_optimizer(cfg: Config, policy: torch.nn.Module) -> torch.optim.Adam:
    """Adam: the foreach algorithm, over flat buffers on the CPU (:class:`FlatAdam`, the same
    numbers in fewer kernels); or the fused kernel with ``optim.fused`` where torch has it (CPU,
    CUDA). Built after the policy is on its device: the CPU parameters move into a buffer."""
    params = list(policy.parameters())
    if cfg.optim.fused and all(p.device.type in ("cpu", "cuda") for p in params):
        return torch.optim.Adam(params, lr=cfg.optim.lr, eps=cfg.optim.eps, fused=True)
    return FlatAdam(params, lr=cfg.optim.lr, eps=cfg.optim.eps)


def gradient_step(run: Run, terms) -> None:
    """One optimizer step on the sum of the ``loss_*`` terms: backward, the gradient hook,
    clipping, step. A step whose loss or gradient norm is not finite is skipped (the guard counts
    it and stops a run that keeps diverging)."""
    loss = sum(v for k, v in terms.items() if k.startswith("loss_"))
    params = list(run.policy.parameters())
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if run.grad_hook is not None:
        run.grad_hook(params)
    max_norm = run.cfg.optim.max_grad_norm
    if max_norm is not None:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    if run.guard.allows(loss, norm):
        run.optimizer.step()
    else:
        run.optimizer.zero_grad(set_to_none=True)


def set_lr(run: Run, progress: float) -> float:
    """Linear annealing, anchored to total_frames."""
    lr = run.cfg.optim.lr * (1 - progress if run.cfg.optim.anneal_lr else 1)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return lr


def update(run: Run, batch, progress: float, frames: int) -> dict[str, float]:
    """What the algorithm learns from a fresh rollout ([T, B]) at ``progress`` of the schedule
    and ``frames`` collected so far: the mean of each logged scalar term, then the skipped steps,
    the lr and the algorithm's own logs."""
    lr = set_lr(run, progress)
    sums: dict[str, torch.Tensor] = {}
    count = 0

    def step(terms, apply: bool = True) -> None:
        nonlocal count
        if apply:
            gradient_step(run, terms)
        for k, v in terms.items():
            if v.dim() == 0:
                sums[k] = sums.get(k, 0.0) + v.detach()
        count += 1

    logs = run.algo.update(batch, progress, frames, step)
    # one sync for all the means, not one per term
    means = torch.stack(list(sums.values())).div(max(count, 1)).tolist() if sums else []
    skipped = run.guard.take_skipped()
    return dict(zip(sums, means, strict=True)) | {"nonfinite_steps": skipped, "lr": lr} | logs


def episode_stats(batch, comm: Solo = SOLO) -> dict[str, float]:
    """The episodes that ended in ``batch`` (on every rank)."""
    done = batch[K.NEXT, K.DONE].reshape(-1)
    mean, n = comm.returns(batch[K.NEXT, K.EPISODE_RETURN].reshape(-1)[done])
    return {"train/return_mean": mean, "train/episodes": n}


def train(
    cfg: Config, run_dir: Path, comm: Solo = SOLO, hooks: Hooks | None = None
) -> dict[str, float]:
    """Trains until ``total_frames``; writes metrics.csv, checkpoints and summary.json in
    ``run_dir`` (rank 0 alone, when ``comm`` has several). Continues ``cfg.resume``'s latest
    checkpoint when set. ``hooks``: what to call in the loop (rltool tune's pruner)."""
    hooks = hooks or Hooks()
    check_packages(cfg.logger)  # a missing optional package: refused before anything is built
    run = build(cfg, run_dir, comm)
    session = Session.start(run, run_dir)  # resume, or refuse a folder holding a checkpoint
    if session.finished:
        _close(run, session)
        return _nothing_to_do(cfg, run_dir, session.counters.frames)
    comm.attach(run)
    c = session.counters  # frames, next_eval, ... (saved in checkpoints)
    loss_device = module_device(run.policy)  # each batch moves there from the storing device
    devices = run.collector.devices | {"loss": str(loss_device)}
    if comm.writer:
        write_text(run_dir / layout.DEVICES, json.dumps(devices, indent=2))
        _log.info("devices: " + ", ".join(f"{k} {v}" for k, v in devices.items()))
    loggers = (
        make_loggers(cfg.logger, run_dir, cfg.total_frames, config=cfg)
        if comm.writer
        else Loggers([])
    )
    eval_seed = cfg.seed + cfg.eval.seed_offset
    try:
        while c.frames < cfg.total_frames:
            t0 = time.perf_counter()
            batch = comm.collect(run.collector)  # a slow rank's may be cut short (sync_fraction)
            c.frames += comm.frames(batch.numel())  # every rank's
            comm.merge_stats(run.env)
            if batch.device != loss_device:
                batch = batch.to(loss_device)
            t1 = time.perf_counter()
            row = {
                "frames": c.frames,
                **episode_stats(batch, comm),
                **update(run, batch, session.progress(), c.frames),
            }
            t2 = time.perf_counter()
            final = c.frames >= cfg.total_frames  # the final evaluation: more episodes
            due = c.frames >= c.next_eval or final
            if due and comm.writer:  # rank 0 evaluates for all (the parameters are the same)
                episodes = cfg.eval.final_episodes if final else cfg.eval.episodes
                row |= evaluate(
                    run.policy, run.eval_env, eval_seed, episodes, cfg.eval.max_episode_steps
                )
                session.record_eval(row["eval/return_mean"])  # the best policy, when it is
                for hook in () if final else hooks.on_eval:
                    hook(run_dir, row)
            c.next_eval += cfg.eval.every_frames if due else 0
            t3 = time.perf_counter()
            row |= {
                "time/collect_s": t1 - t0,
                "time/update_s": t2 - t1,
                "time/eval_s": t3 - t2,
                "time_s": session.elapsed(),
                "fps": c.frames / session.elapsed(),
            }
            loggers.log(row)
            loggers.log_episodes(c.frames, batch)  # each finished episode's return: MMER
            session.end_iteration(row)  # checkpoint when due, at the end, or on a signal
    finally:
        loggers.close()
        _close(run, session)
    summary = {
        "frames": c.frames,
        "wall_time_s": session.elapsed(),
        **{k: v for k, v in row.items() if k.startswith("eval/")},  # the final evaluation
        "best_eval/return_mean": c.best_return,  # the best of every evaluation, final included
        "best_eval/frames": c.best_frames,
    }
    if comm.writer:
        write_text(run_dir / layout.SUMMARY, json.dumps(summary, indent=2))
    return summary


def _close(run: Run, session: Session) -> None:
    session.close()  # the signal handlers
    run.collector.close()
    run.eval_env.close()
    run.algo.close()


def _nothing_to_do(cfg: Config, run_dir: Path, frames: int) -> dict[str, float]:
    """A resume of a run already at its budget: one line, and the run's summary as it is."""
    _log.info(
        f"rltool: the run in {run_dir} already reached {frames:,} frames (total_frames="
        f"{cfg.total_frames:,}): nothing to do; extend it with total_frames=<more>"
    )
    try:
        return json.loads((Path(run_dir) / layout.SUMMARY).read_text())
    except (OSError, ValueError):
        return {"frames": frames}
