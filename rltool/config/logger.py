"""The ``logger`` group's schemas: the CSV file, wandb, TensorBoard and the progress lines."""

from __future__ import annotations

from dataclasses import dataclass, field

from rltool.config.fields import check_fields, choice, ranged


@dataclass
class CSVLoggerConfig:
    filename: str = "metrics.csv"  # always written, in the run directory


@dataclass
class WandbLoggerConfig:
    enabled: bool = False  # logger=[csv,wandb] turns it on
    # online | offline | disabled; online falls back to offline without an API key or network
    # (never blocks)
    mode: str = choice("online", ("online", "offline", "disabled"))
    project: str = "rltool"  # the wandb project the runs are logged to
    entity: str | None = None  # the wandb team or user; null: the account's default
    group: str | None = None  # null: the sweep folder in a multirun (one group per sweep)
    name: str | None = None  # null: the job's overrides in a multirun, else the run folder
    tags: list[str] = field(default_factory=list)  # wandb run tags
    init_timeout_s: float = ranged(30.0, gt=0)  # online only

    def __post_init__(self):
        check_fields(self, "logger.wandb")


@dataclass
class TensorBoardLoggerConfig:
    enabled: bool = False  # logger=[csv,tensorboard] turns it on
    subdir: str = "tensorboard"  # event files go to <run_dir>/<subdir>


@dataclass
class LoggerConfig:
    csv: CSVLoggerConfig = field(default_factory=CSVLoggerConfig)
    wandb: WandbLoggerConfig = field(default_factory=WandbLoggerConfig)
    tensorboard: TensorBoardLoggerConfig = field(default_factory=TensorBoardLoggerConfig)
    # auto (bar on a terminal, lines otherwise) | lines | none
    progress: str = choice("auto", ("auto", "lines", "none"))
    every_s: float = ranged(5.0, ge=0)  # plain progress lines at most this often

    def __post_init__(self):
        check_fields(self, "logger")
