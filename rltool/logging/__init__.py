"""Loggers: console progress and the CSV metrics file (always); more plug in through the
``logger`` config group."""

from __future__ import annotations

from pathlib import Path

from rltool.config import LoggerConfig
from rltool.logging.csv import CSVLogger
from rltool.logging.progress import ProgressLogger


class Loggers:
    """Fans each row (a flat dict with ``frames``) out to every logger."""

    def __init__(self, loggers: list):
        self.loggers = loggers

    def log(self, row: dict) -> None:
        for lg in self.loggers:
            lg.log(row)

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()


def make_loggers(cfg: LoggerConfig, run_dir: Path, total_frames: int) -> Loggers:
    return Loggers(
        [
            ProgressLogger(total_frames, cfg.progress, cfg.every_s),
            CSVLogger(Path(run_dir) / cfg.csv.filename),
        ]
    )


__all__ = ["CSVLogger", "Loggers", "ProgressLogger", "make_loggers"]
