"""``rltool``: a small dispatcher over subcommands, each a Hydra app.

Hydra has no subcommands: we pop the subcommand and call its ``@hydra.main`` function. The
dispatcher owns error printing: any failure in composing or validating the config prints one
line and exits with status 2; ``--debug`` (or ``HYDRA_FULL_ERROR=1``) shows the full traceback.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from rltool import sweep
from rltool.config import register_configs, to_config
from rltool.errors import RunStopped, one_line
from rltool.resume import cleanup, resume_args
from rltool.sweep import current_job, run_job


def conf_dir() -> str:
    """The packaged configs (wheel: rltool/conf) or the repo's top-level conf/ (source)."""
    here = Path(__file__).resolve().parent
    packaged = here / "conf"
    return str(packaged if packaged.is_dir() else here.parent / "conf")


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


def train_cmd() -> int:
    """``rltool train``; after a sweep, exit status 1 if a job failed."""
    sweep.LAST_SWEEP = None
    train_app()
    result = sweep.LAST_SWEEP
    return 1 if result is not None and (result.failed or result.other) else 0


def _lazy(module: str, func: str):
    def run() -> int:
        import importlib

        return getattr(importlib.import_module(module), func)(sys.argv[1:])

    return run


COMMANDS = {
    "train": (train_cmd, "train an agent (Hydra overrides: env=..., policy=..., ...; -m: sweep)"),
    "eval": (_lazy("rltool.evaluation", "main"), "evaluate a run: run=<dir> episodes=N video=true"),
    "report": (_lazy("rltool.report", "report_main"), "table of runs/sweeps: <dirs...> [--format]"),
    "plot": (_lazy("rltool.report", "plot_main"), "learning curves of runs/sweeps -> PNG"),
}

USAGE = (
    "usage: rltool <command> [overrides ...] [--debug]\n\ncommands:\n"
    + "".join(f"  {name:<8} {help_}\n" for name, (_, help_) in COMMANDS.items())
    + "\nrltool <command> --help shows a command's config groups and options."
)


class _QuietStderr:
    """stderr without Hydra's "Error executing job with overrides" preamble: we print our own
    line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        if text.startswith("Error executing job with overrides"):
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"rltool: error: unknown command {name!r}: choose one of "
            f"{', '.join(COMMANDS)} (rltool --help)",
            file=sys.stderr,
        )
        return 2
    env_before = {k: os.environ.get(k) for k in ("HYDRA_FULL_ERROR", "RLTOOL_DEBUG")}
    if debug:
        os.environ["RLTOOL_DEBUG"] = "1"  # multirun jobs print their tracebacks too
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; we print one line
    tmp = None
    stderr, sys.stderr = sys.stderr, _QuietStderr(sys.stderr)
    try:
        if name == "train":  # resume=<run_dir>: compose from the run's saved config
            rest, tmp = resume_args(rest)
        sys.argv = [f"rltool-{name}", *rest]
        rc = COMMANDS[name][0]()
    except RunStopped as e:  # on purpose: a signal (checkpoint written) or divergence
        print(f"rltool {name}: {e}", file=stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"rltool {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every failure becomes one line unless --debug
        if debug:
            raise
        print(f"rltool {name}: error: {one_line(e)}", file=stderr)
        return 2
    finally:
        sys.stderr = stderr
        cleanup(tmp)
        for k, v in env_before.items():  # main() may run again in this process (tests, API)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
