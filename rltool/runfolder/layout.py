"""The run folder: the name of every file and folder rltool reads or writes in a run's directory,
spelled once. Light on purpose (no torch, no Hydra)::

    <run_dir>/                       outputs/<date>/<time>/ (sweep job: multirun/<date>/<time>/<n>/)
      config.yaml                    the run's resolved config (a resume composes from it)
      metrics.csv                    one row per iteration (the name: the run's logger.csv.filename)
      metrics.csv.interrupted-<n>    a sweep job's old rows, set aside when it started again
      episodes.csv                   frames and return of each finished training episode (MMER)
      summary.json                   the final eval and the wall time
      status.json                    the job's status (rltool.sweeps.jobs)
      .lock                          held (flock) by the process writing the folder: host, pid
      devices.json                   where the env, the policy, the rollouts and the loss ran
      eval.json, videos/             rltool eval's result and recordings
      checkpoints/
        ckpt-<12 digits>.pt          a checkpoint, named by its frame count
        ckpt-<12 digits>.<name>/     a folder saver's files beside it (the replay buffer)
        latest                       the name of the newest complete checkpoint, one line
        best.pt                      the policy at its best evaluation (checkpoint.save_best)
      .hydra/overrides.yaml          Hydra's record of the launch (and train.log, Hydra's log)
      wandb_id, wandb/, tensorboard/ the loggers' files
      replay/                        a memmap replay buffer without buffer.path (deleted at the end)
"""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

from omegaconf import OmegaConf

CONFIG = "config.yaml"
# config.yaml's first line: the rltool version that wrote it (a YAML comment: loaders skip it)
WRITTEN_BY = "# written by rltool "
METRICS = "metrics.csv"  # the default of logger.csv.filename; a run's own: metrics_name(run_dir)
SUMMARY = "summary.json"
EPISODES = "episodes.csv"  # one row per finished training episode: frames, return (for MMER)
STATUS = "status.json"
LOCK = ".lock"  # the run folder's writer lock (rltool.runfolder.lock): host and pid of the holder
LOG = "train.log"  # Hydra's job log (hydra.job.name=train); the run's end line goes there too
DEVICES = "devices.json"
EVAL = "eval.json"
VIDEOS = "videos"
CHECKPOINTS = "checkpoints"
LATEST = "latest"  # in CHECKPOINTS: the pointer to the newest complete checkpoint
BEST = "best"  # in CHECKPOINTS: best.pt, the policy of the best evaluation (checkpoint=best)
CHECKPOINT_GLOB = "ckpt-*.pt"
CHECKPOINT_PATTERN = re.compile(r"^ckpt-(\d{12})\.pt$")  # a complete checkpoint's file name
HYDRA = ".hydra"
OVERRIDES = "overrides.yaml"  # in HYDRA
HYDRA_CONFIG = "hydra.yaml"  # in HYDRA: its runtime.choices say which option each group took
WANDB_ID = "wandb_id"
WANDB = "wandb"
TENSORBOARD = "tensorboard"  # the default of logger.tensorboard.subdir


def checkpoint_stem(frames: int) -> str:
    """``ckpt-<frames, 12 digits>``: the checkpoint file's name without ``.pt``, and the prefix of
    its folders."""
    return f"ckpt-{frames:012d}"


def checkpoint_name(frames: int) -> str:
    return f"{checkpoint_stem(frames)}.pt"


def checkpoint_frames(name: str) -> int | None:
    """The frame count a checkpoint file name holds, or None for any other name."""
    m = CHECKPOINT_PATTERN.match(name)
    return int(m.group(1)) if m else None


def interrupted_name(metrics: str, n: int) -> str:
    """The n-th set-aside copy of the metrics file named ``metrics``."""
    return f"{metrics}.interrupted-{n}"


def metrics_name(run_dir: str | os.PathLike) -> str:
    """The run's metrics file name: ``logger.csv.filename`` of its ``config.yaml``, or
    :data:`METRICS` when that file is missing or does not say."""
    path = Path(run_dir) / CONFIG
    if not path.is_file():
        return METRICS
    try:
        name = OmegaConf.select(OmegaConf.load(path), "logger.csv.filename")
    except Exception:  # noqa: BLE001 - unreadable or not a mapping: the default name
        return METRICS
    return name if isinstance(name, str) and name else METRICS


def written_by(run_dir: str | os.PathLike) -> str | None:
    """The rltool version that wrote the run's ``config.yaml`` (its first line), or None for a
    run written before versions were recorded (or no readable config)."""
    try:
        with open(Path(run_dir) / CONFIG, encoding="utf-8") as f:
            first = f.readline().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return first[len(WRITTEN_BY) :] or None if first.startswith(WRITTEN_BY) else None


def has_checkpoint(run_dir: str | os.PathLike) -> bool:
    """Whether ``run_dir/checkpoints`` holds a ``latest`` pointer or a checkpoint file."""
    ck = Path(run_dir) / CHECKPOINTS
    try:
        return ck.is_dir() and any(
            p.name == LATEST or fnmatch.fnmatchcase(p.name, CHECKPOINT_GLOB) for p in ck.iterdir()
        )
    except OSError:  # a name too long to ask about: no checkpoint (making it is refused later)
        return False


class RunFolder:
    """The paths of one run folder (nothing is read or created, except :attr:`metrics`, which
    reads the run's config for its file name)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.path)!r})"

    @property
    def config(self) -> Path:
        return self.path / CONFIG

    @property
    def metrics(self) -> Path:
        return self.path / metrics_name(self.path)

    @property
    def episodes(self) -> Path:
        return self.path / EPISODES

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def status(self) -> Path:
        return self.path / STATUS

    @property
    def lock(self) -> Path:
        return self.path / LOCK

    @property
    def log(self) -> Path:
        return self.path / LOG

    @property
    def devices(self) -> Path:
        return self.path / DEVICES

    @property
    def eval(self) -> Path:
        return self.path / EVAL

    @property
    def videos(self) -> Path:
        return self.path / VIDEOS

    @property
    def checkpoints(self) -> Path:
        return self.path / CHECKPOINTS

    @property
    def latest(self) -> Path:
        """The pointer file (it holds the newest checkpoint's name)."""
        return self.checkpoints / LATEST

    @property
    def best(self) -> Path:
        """The policy at its best evaluation (no optimizer, replay or RNG: not for resuming)."""
        return self.checkpoints / f"{BEST}.pt"

    @property
    def overrides(self) -> Path:
        return self.path / HYDRA / OVERRIDES

    @property
    def hydra_config(self) -> Path:
        return self.path / HYDRA / HYDRA_CONFIG

    @property
    def wandb_id(self) -> Path:
        return self.path / WANDB_ID
