"""Loggers: console progress and the CSV metrics file (always); wandb and TensorBoard when the
``logger`` group enables them (``logger=[csv,wandb,tensorboard]``). Every row carries ``frames``,
the step of every logger."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from rltool.config import LoggerConfig
from rltool.errors import ConfigError
from rltool.logging.csv import CSVLogger
from rltool.logging.episodes import EpisodesLog
from rltool.logging.progress import ProgressLogger
from rltool.runfolder import layout


class Loggers:
    """Fans each row (a flat dict with ``frames``) out to every logger; the finished episodes'
    returns go to the episodes file (``episodes``, None on a rank that writes nothing)."""

    def __init__(self, loggers: list, episodes: EpisodesLog | None = None):
        self.loggers = loggers
        self.episodes = episodes

    def log(self, row: dict) -> None:
        for lg in self.loggers:
            lg.log(row)

    def log_episodes(self, frames: int, batch) -> None:
        """Each episode that ended in ``batch``: its return, at ``frames`` (for MMER)."""
        if self.episodes is not None:
            self.episodes.log(frames, batch)

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()


def check_packages(cfg: LoggerConfig) -> None:
    """Raises ConfigError when an enabled logger's package is missing (before a run starts)."""
    import importlib

    need = ["tensorboard"] if cfg.tensorboard.enabled else []
    if cfg.wandb.enabled and cfg.wandb.mode != "disabled":
        need.append("wandb")
    for name in need:
        try:
            importlib.import_module(name)
        except ImportError:
            raise ConfigError(
                f"logger needs the missing package {name!r}: pip install 'rltool[loggers]'"
            ) from None


def make_loggers(cfg: LoggerConfig, run_dir: Path, total_frames: int, config=None) -> Loggers:
    """Progress and CSV always; wandb / TensorBoard when their node is enabled. ``config``: the
    run's whole Config (wandb records it)."""
    loggers = [
        ProgressLogger(total_frames, cfg.progress, cfg.every_s),
        CSVLogger(Path(run_dir) / cfg.csv.filename),
    ]
    try:
        if cfg.tensorboard.enabled:
            from rltool.logging.tensorboard import TensorBoardLogger

            loggers.append(TensorBoardLogger(cfg.tensorboard, run_dir))
        if cfg.wandb.enabled and cfg.wandb.mode != "disabled":
            from rltool.logging.wandb import WandbLogger

            plain = OmegaConf.to_container(OmegaConf.structured(config)) if config else None
            loggers.append(WandbLogger(cfg.wandb, run_dir, plain))
    except ImportError as e:
        Loggers(loggers).close()
        raise ConfigError(
            f"logger needs the missing package {e.name!r}: pip install 'rltool[loggers]'"
        ) from None
    except BaseException:
        Loggers(loggers).close()
        raise
    return Loggers(loggers, EpisodesLog(Path(run_dir) / layout.EPISODES))


__all__ = [
    "CSVLogger",
    "EpisodesLog",
    "Loggers",
    "ProgressLogger",
    "check_packages",
    "make_loggers",
]
