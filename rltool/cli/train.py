"""``rltool train [overrides] [-m]``: the Hydra app (compose, validate, run one job or a sweep)."""

from __future__ import annotations

import dataclasses
import sys

import hydra
from omegaconf import DictConfig

from rltool import sweep
from rltool.cli.resume_argv import check_no_schema, cleanup, resume_args
from rltool.config import conf_dir, register_configs, to_config
from rltool.errors import EXIT_JOB_FAILED, EXIT_OK
from rltool.sweep import current_job, run_job

register_configs()


@hydra.main(config_path=conf_dir(), config_name="config", version_base="1.3")
def train_app(dcfg: DictConfig) -> float | None:
    from rltool.train import train  # torch and friends load only once the config is valid

    job = current_job()

    def fit(resume: bool) -> dict:
        cfg = to_config(dcfg)
        if resume:  # an interrupted multirun job continues from its latest checkpoint
            cfg = dataclasses.replace(cfg, resume=str(job.run_dir))
        return train(cfg, job.run_dir)

    summary = run_job(job, fit)  # status.json; in a sweep: skip done, resume, record failures
    return (summary or {}).get("eval/return_mean")


def train_cmd(argv: list[str]) -> int:
    """``rltool train``; after a sweep, exit status 1 (EXIT_JOB_FAILED) if a job failed.
    ``resume=<run_dir>`` becomes Hydra arguments that compose the run's saved config first."""
    check_no_schema(argv)  # base_<group> is for the resume rewrite below, never the user's
    args, tmp = resume_args(argv)
    sweep.LAST_SWEEP = None
    sys.argv = ["rltool-train", *args]  # Hydra parses sys.argv
    try:
        train_app()
    finally:
        cleanup(tmp)
    result = sweep.LAST_SWEEP
    return EXIT_JOB_FAILED if result is not None and (result.failed or result.other) else EXIT_OK
