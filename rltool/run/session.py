"""A training session around the loop: start or resume, counters and the annealing schedule,
checkpoints (periodic, final, on SIGTERM / SIGINT), exact resume.

What a checkpoint holds (see :func:`state_parts`): the model, the optimizer, the non-finite guard,
the normalisation statistics, the episodes in progress (env state + the collector's carried root),
plus the counters, the schedule anchor, the RNG states of python / numpy / torch, and the resolved
config. The algorithm adds its own parts (``Algorithm.state_parts``: a target network, a replay
buffer's folder).

Schedule rule: ``progress = p0 + (1 - p0) * (frames - f0) / (total_frames - f0)``, anchored at
(f0, p0) = (0, 0). A resume that changes ``total_frames`` re-anchors at the checkpoint: (frames,
progress there), so annealed values continue from where they were and reach 0 at the new budget.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os
import random
import shlex
import signal
import threading
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rltool import memories
from rltool.envs.workers import StuckWatch
from rltool.errors import (
    EXIT_DIVERGED,
    EXIT_INTERRUPTED,
    EXIT_PREEMPTED,
    RunStopped,
    UserError,
    warn,
)
from rltool.run import checkpoint as ckpt
from rltool.runfolder import layout
from rltool.runfolder.writes import write_text

_log = logging.getLogger(__name__)


@dataclasses.dataclass
class Counters:
    frames: int = 0
    updates: int = 0
    episodes: int = 0
    next_eval: int = 0
    elapsed_s: float = 0.0
    anchor_frames: int = 0  # the schedule's anchor (see the module docstring)
    anchor_progress: float = 0.0
    total_frames: int = 1  # the budget the anchor refers to
    best_return: float | None = None  # the best evaluation's mean return so far, and when
    best_frames: int | None = None


def rng_state() -> dict:
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": random.getstate(),
        "numpy": [name, torch.from_numpy(key.astype(np.int64)), pos, has_gauss, cached],
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    name, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Episodes:
    """The episodes in progress: every env's state and the collector's carried root. Without the
    env state protocol, a resume starts fresh episodes (with a warning)."""

    def __init__(self, env, collector, env_id: str):
        self.env, self.collector, self.env_id = env, collector, env_id

    def state_dict(self) -> dict:
        return {"env": self.env.get_state(), "collector": self.collector.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if state["env"] is None or self.env.get_state() is None:
            warn(
                f"env {self.env_id} cannot save its state (no get_state/set_state, or the async "
                "backend): the resumed run starts fresh episodes, so it is not an exact replay"
            )
            if self.env.reward_scaler is not None:  # its running return belonged to old episodes
                self.env.reward_scaler.reset_returns()
            self.collector.frames = state["collector"]["frames"]
            return
        self.env.set_state(state["env"])
        self.collector.load_state_dict(state["collector"])


def state_parts(run) -> tuple[dict, dict]:
    """(stateful objects by name, folder savers by name) of a run."""
    parts = {"policy": run.policy, "optimizer": run.optimizer, "guard": run.guard}
    if run.env.obs_norm is not None:
        parts["obs_norm"] = run.env.obs_norm
    if run.env.reward_scaler is not None:
        parts["reward_scaler"] = run.env.reward_scaler
    parts["episodes"] = Episodes(run.env, run.collector, run.cfg.env.id)  # after the normalisers
    own, folders = run.algo.state_parts()
    clash = sorted(set(own) & set(parts))
    if clash:
        raise ValueError(f"{type(run.algo).__name__}.state_parts reuses the names {clash}")
    return parts | own, folders


# a process's own parts (the rest is the same on every rank: the model, the optimizer, ...)
OWN_PARTS = ("episodes", "reward_scaler")


def pack(state: dict, rng: dict, comm) -> dict:
    """The checkpoint entries of ``state`` and ``rng``: as they are for one process; for several,
    the shared parts once and ``ranks``: each rank's own parts and RNG (rank 0: all of them; the
    others: None)."""
    own = {k: state.pop(k) for k in OWN_PARTS if k in state} | {"rng": rng}
    ranks = comm.gather(own)
    if comm.world == 1:
        return {"rng": rng, "state": state | {k: v for k, v in own.items() if k != "rng"}}
    return None if ranks is None else {"rng": ranks[0]["rng"], "state": state, "ranks": ranks}


def unpack(body: dict, comm, path: Path) -> tuple[dict, dict]:
    """(state, rng) of this rank in checkpoint ``body``; a checkpoint of another world size is
    refused."""
    ranks = body.get("ranks")
    world = 1 if ranks is None else len(ranks)
    if world != comm.world:
        raise UserError(
            f"checkpoint {path} was written by {world} process(es), this run has {comm.world}: "
            f"resume it with {world} (distributed.nproc_per_node={world}, or torchrun "
            f"--nproc-per-node={world})"
        )
    if ranks is None:
        return body["state"], body["rng"]
    own = ranks[comm.rank]
    return body["state"] | {k: v for k, v in own.items() if k != "rng"}, own["rng"]


def config_text(record: dict) -> str:
    """``config.yaml``'s text: the line naming the rltool version that wrote it, then the
    config."""
    from rltool import __version__

    return f"{layout.WRITTEN_BY}{__version__}\n{OmegaConf.to_yaml(record)}"


def _plain(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cfg))


ECHO_S = 5.0  # a rank's second signal this soon after the first is the same one, forwarded


class Session:
    """Counters, schedule, checkpoints and signals of one run (see :meth:`start`)."""

    def __init__(self, run, run_dir: Path, counters: Counters, finished: bool = False):
        self.run, self.cfg, self.run_dir = run, run.cfg, Path(run_dir)
        self.dir = ckpt.checkpoint_dir(run_dir)
        self.counters, self.last_saved = counters, counters.frames
        self._t0, self._base_s = time.perf_counter(), counters.elapsed_s
        self.stop_signal: int | None = None
        self.finished = finished  # resumed at its budget already: nothing to train
        self._old_handlers: dict = {}
        self._stuck: StuckWatch | None = None
        if not finished:
            self._install_signals()

    # ---- start / resume ----
    @classmethod
    def start(cls, run, run_dir: Path) -> Session:
        """A fresh session (refusing a folder that holds a checkpoint), or the state of
        ``cfg.resume``'s latest checkpoint loaded into ``run`` once its parts' layout matches the
        run's (:func:`~rltool.run.checkpoint.check_parts`); a run already at its budget is a
        :attr:`finished` session with nothing loaded. Checks everything before changing any
        file."""
        cfg = run.cfg
        if cfg.resume is None:
            found = ckpt.latest(ckpt.checkpoint_dir(run_dir))
            if found is not None:
                raise UserError(
                    f"{run_dir} already holds a checkpoint ({found.name}): continue it with "
                    f"rltool train {shlex.quote(f'resume={run_dir}')}, or choose another "
                    "hydra.run.dir"
                )
            if run.comm.writer:
                write_text(Path(run_dir) / layout.CONFIG, config_text(_plain(cfg)))
            c = Counters(next_eval=cfg.eval.every_frames, total_frames=cfg.total_frames)
            return cls(run, run_dir, c)
        path = ckpt.latest(ckpt.checkpoint_dir(run_dir))
        if path is None:
            raise UserError(f"resume={cfg.resume}: no checkpoint in {run_dir}: start a new run")
        body = ckpt.load(path)
        fix = f"restore {Path(run_dir) / layout.CONFIG}, or start a new run"
        ckpt.check_config(memories.migrate(body["config"]), _plain(cfg), path, fix)
        state, rng = unpack(body, run.comm, path)
        c = Counters(**body["counters"])
        if c.frames >= cfg.total_frames:  # nothing to do: nothing loaded, nothing written
            return cls(run, run_dir, c, finished=True)
        parts, folders = state_parts(run)
        # a layout that differs is bad input (one line); anything raised after this is a bug
        ckpt.check_parts(path, state, {name: obj.state_dict() for name, obj in parts.items()})
        for name, obj in parts.items():
            obj.load_state_dict(state[name])
        ckpt.load_folders(path, folders)
        if c.total_frames != cfg.total_frames:  # a new budget: re-anchor, never jump
            p = progress(c, c.frames)
            c.anchor_frames, c.anchor_progress, c.total_frames = c.frames, p, cfg.total_frames
        if run.comm.writer:
            cls._record(cfg, Path(run_dir), c, path)
        set_rng_state(rng)  # last: nothing after this may draw random numbers
        return cls(run, run_dir, c)

    @staticmethod
    def _record(cfg, run_dir: Path, c: Counters, path: Path) -> None:
        """The writer's part of a resume: metrics cut back to the checkpoint, the config."""
        _truncate_metrics(run_dir / cfg.logger.csv.filename, c.frames)
        record = _plain(dataclasses.replace(cfg, resume=None))
        if OmegaConf.to_container(OmegaConf.load(run_dir / layout.CONFIG)) != record:
            write_text(run_dir / layout.CONFIG, config_text(record))
        _log.info(f"rltool: resuming {run_dir} from {path.name} ({c.frames:,} frames)")

    # ---- the loop's side ----
    def progress(self) -> float:
        """Schedule progress in [0, 1] for the update at the current frame count."""
        return progress(self.counters, self.counters.frames)

    def elapsed(self) -> float:
        return self._base_s + time.perf_counter() - self._t0

    def end_iteration(self, row: dict) -> None:
        """Counts the iteration; writes a checkpoint when due, at the end of the budget or after
        a signal (then stops the run with exit code 75)."""
        c, every = self.counters, self.cfg.checkpoint.every_frames
        # decided once, by all ranks together: a signal landing after the vote waits for the next
        # iteration's (read again below, it split the ranks: one in the checkpoint's gather, the
        # other in the next update's all-reduce, until the timeout)
        stop = self.run.comm.any(self.stop_signal is not None)
        if stop and self.stop_signal is None:
            self.stop_signal = signal.SIGTERM  # another rank was told to stop: all stop here
        c.updates += 1
        c.episodes += int(row.get("train/episodes", 0))
        due = every is not None and c.frames // every > self.last_saved // every
        if due or c.frames >= self.cfg.total_frames or stop:
            path = self.save()
        if stop and c.frames < self.cfg.total_frames:
            name = signal.Signals(self.stop_signal).name
            raise RunStopped(
                f"stopped by {name} at {c.frames:,} frames; checkpoint {path or 'by rank 0'} "
                f"written; continue with: rltool train {shlex.quote(f'resume={self.run_dir}')}",
                EXIT_PREEMPTED,
            )

    def record_eval(self, ret: float) -> None:
        """Keeps the best evaluation (mean return ``ret`` now); with ``checkpoint.save_best``,
        an evaluation that beats it writes the policy (and the observation statistics it was
        evaluated with) as ``checkpoints/best.pt``. The first of equal bests is kept."""
        c = self.counters
        if ret != ret or (c.best_return is not None and ret <= c.best_return):  # nan, or no better
            return
        c.best_return, c.best_frames = float(ret), c.frames
        if self.cfg.checkpoint.save_best:
            parts, _ = state_parts(self.run)
            state = {k: parts[k].state_dict() for k in ("policy", "obs_norm") if k in parts}
            payload = {
                "counters": dataclasses.asdict(c),
                "config": _plain(self.cfg),
                "env": self.run.env.record.to_plain(),
                "state": state,
            }
            self.dir.mkdir(parents=True, exist_ok=True)
            ckpt.save_file(layout.RunFolder(self.run_dir).best, payload)

    def save(self) -> Path | None:
        """Writes a checkpoint of the run now (never a non-finite model); on several ranks, rank
        0 writes every rank's own parts (the others return None)."""
        parts, folders = state_parts(self.run)
        state = {name: obj.state_dict() for name, obj in parts.items()}
        if not all(torch.isfinite(t).all() for t in _tensors(state["policy"])):
            raise RunStopped(
                f"stopped: the model holds inf/nan at {self.counters.frames:,} frames; the last "
                f"good checkpoint is kept in {self.dir}: lower optim.lr or set optim.max_grad_norm",
                EXIT_DIVERGED,
            )
        packed = pack(state, rng_state(), self.run.comm)
        if packed is None:
            self.last_saved = self.counters.frames
            return None
        counters = dataclasses.replace(self.counters, elapsed_s=self.elapsed())
        payload = {"counters": dataclasses.asdict(counters), "config": _plain(self.cfg), **packed}
        payload["env"] = self.run.env.record.to_plain()  # load_policy / export build no env
        _fsync(self.run_dir / self.cfg.logger.csv.filename)  # its rows up to here survive too
        path = ckpt.save(self.dir, self.counters.frames, payload, folders, self.cfg.checkpoint.keep)
        self.last_saved = self.counters.frames
        return path

    def _install_signals(self) -> None:
        """SIGTERM / SIGINT: finish the iteration, checkpoint, stop (exit 75); a second one
        exits at once (128 + signal number) and leaves the last checkpoint as it is (a rank of
        several ignores one within ECHO_S s: Slurm signals the launcher and the ranks alike,
        and the launcher forwards it). An env call still running GRACE_S s after the first ends
        the process (75 for SIGTERM, 130 for SIGINT; :class:`~rltool.envs.workers.StuckWatch`)."""
        self._old_handlers = {}
        if threading.current_thread() is not threading.main_thread():
            return

        def handler(signum, _frame):
            name = signal.Signals(signum).name
            if self.stop_signal is None:
                self.stop_signal, self._stop_at = signum, time.monotonic()
                _log.warning(
                    f"\nrltool: {name}: finishing this update, then writing a checkpoint "
                    f"({name} again exits at once)"
                )
                return
            if self.run.comm.world > 1 and time.monotonic() - self._stop_at < ECHO_S:
                return  # the launcher forwarding the signal Slurm also sent this rank: the same
            _log.warning(f"\nrltool: second {name}: exiting now, no new checkpoint")
            raise SystemExit(128 + signum)

        for s in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[s] = signal.signal(s, handler)
        # an env stuck in reset / step never finishes the update: ended within a bound instead
        codes = {signal.SIGTERM: EXIT_PREEMPTED, signal.SIGINT: EXIT_INTERRUPTED}
        tail = "exiting now; the latest checkpoint is kept; continue with: rltool train " + (
            shlex.quote(f"resume={self.run_dir}")
        )
        self._stuck = StuckWatch(codes, tail)

    def close(self) -> None:
        """Gives the signals back to their previous handlers."""
        for s, h in self._old_handlers.items():
            signal.signal(s, h)
        self._old_handlers = {}
        if self._stuck is not None:
            self._stuck.close()
            self._stuck = None


def progress(c: Counters, frames: int) -> float:
    # at most 1: the last batch ends past total_frames when it does not divide the budget, and
    # annealed values must stop at 0 there, not turn negative (a negative lr ascends the loss)
    return min(
        1.0,
        c.anchor_progress
        + (1 - c.anchor_progress) * (frames - c.anchor_frames) / (c.total_frames - c.anchor_frames),
    )


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)


def _fsync(path: Path) -> None:
    if path.exists():
        with open(path, "rb+") as f:
            os.fsync(f.fileno())


def _truncate_metrics(path: Path, frames: int) -> None:
    """Drops the rows logged after the checkpoint (the resumed run logs them again)."""
    if not path.exists():
        return
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if not rows or "frames" not in rows[0]:
        return
    col, keep = rows[0].index("frames"), []
    for r in rows[1:]:
        if len(r) != len(rows[0]) or not r[col].isdigit() or int(r[col]) > frames:
            break
        keep.append(r)
    if len(keep) == len(rows) - 1:
        return

    text = io.StringIO()
    csv.writer(text).writerows([rows[0], *keep])
    write_text(path, text.getvalue())
