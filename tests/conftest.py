import csv
import fcntl
import os
import subprocess
import sys
from pathlib import Path

import fake_envs  # noqa: F401  (registers the fake envs)
import pytest
import torch

import rltool
from rltool.config.store import register_configs

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("WANDB_MODE", "disabled")
register_configs()  # the schemas make_cfg composes from (rltool train registers them itself)


# every tiny run's evaluation and output: two episodes at each evaluation and at the end, no
# progress bar (a test's own budget, total_frames and batch size, comes beside it)
TINY_EVAL = ["eval.episodes=2", "eval.final_episodes=2", "logger.progress=none"]


# the smallest finished run: one PPO batch on CartPole, one evaluation, one checkpoint
TINY_RUN = (
    "env=cartpole",
    "total_frames=256",
    "collector.frames_per_batch=256",
    "eval.every_frames=256",
    "eval.episodes=1",
    "eval.final_episodes=1",
    "logger.progress=none",
)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A finished :data:`TINY_RUN` folder, trained once per test session and shared by the
    xdist workers (a lock in their common temp folder): for tests that only read a run (copy it
    to change it)."""
    from rltool.cli import main

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # each worker's base folder lies in the session's
    run = root / "tiny_run"
    with (root / "tiny_run.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first worker trains, the others wait for it
        if not (run / "summary.json").is_file():
            assert main(["train", *TINY_RUN, f"hydra.run.dir={run}"]) == 0
    return run


def make_cfg(*overrides: str):
    """The typed config ``rltool train <overrides>`` runs (the public :func:`rltool.compose`)."""
    return rltool.compose(*overrides)


# what a subprocess needs to import this checkout (not an installed rltool) and tests/ (fake envs)
CLI_PYTHONPATH = os.pathsep.join([str(ROOT), str(ROOT / "tests")])


def cli_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a ``python -m rltool`` subprocess: this one, this checkout on the path,
    no ``HYDRA_FULL_ERROR`` (inherited from the shell, it means --debug), plus
    ``env``."""
    out = {**os.environ, "PYTHONPATH": CLI_PYTHONPATH}
    out.pop("HYDRA_FULL_ERROR", None)
    return out | (env or {})


def run_cli(
    *args: str, cwd: Path, timeout: float | None = 240, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m rltool <args>`` in a subprocess (see :func:`cli_env`), output captured as text;
    ``timeout=None`` waits as long as it takes."""
    return subprocess.run(
        [sys.executable, "-m", "rltool", *args],
        cwd=cwd,
        env=cli_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def console():
    """rltool's log lines on the terminal as the commands show them (:func:`rltool.console.
    cli_output`), for a test of what a library call shows there: a library configures no
    logging, and pytest's own handlers would take the lines instead."""
    from rltool.console import cli_output

    with cli_output():
        yield


@pytest.fixture
def cli(monkeypatch, capsys):
    """:func:`run_cli` in this process (no interpreter, torch or Hydra start-up: a second, not
    five): ``rltool.cli.main`` on the same arguments, in ``cwd`` with ``env`` set, its exit code
    and captured output as a CompletedProcess. For tests of what a command prints and returns;
    exit codes of a real process (signals, tracebacks at exit) keep :func:`run_cli`."""

    def run(*args: str, cwd: Path, env: dict[str, str] | None = None, **_):
        from rltool.cli import main
        from rltool.testing import faults as _faults

        capsys.readouterr()  # only this command's output
        with monkeypatch.context() as m:
            m.chdir(cwd)
            for key, value in (env or {}).items():
                m.setenv(key, value)
            m.delenv("HYDRA_FULL_ERROR", raising=False)
            m.setattr(_faults, "_writes", 0)  # the fault counters of a fresh process
            m.setattr(_faults, "_file_writes", 0)
            code = main(list(args))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["rltool", *args], code, out, err)

    return run


def start_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None):
    """``python -m rltool <args>`` started, not awaited (to signal it): a Popen with stdout and
    stderr piped as text."""
    return subprocess.Popen(
        [sys.executable, "-m", "rltool", *args],
        cwd=cwd,
        env=cli_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def submitit_local(monkeypatch, sweep: Path, *overrides: str) -> list[str]:
    """``rltool`` arguments of a sweep into ``sweep`` on submitit's local launcher (its workers
    import this checkout)."""
    monkeypatch.setenv("PYTHONPATH", CLI_PYTHONPATH)
    return [
        "train",
        "-m",
        "hydra/launcher=submitit_local",
        "hydra.launcher.timeout_min=5",
        *overrides,
        f"hydra.sweep.dir={sweep}",
    ]


def is_time_column(name: str) -> bool:
    """time/collect_s, time/update_s, time/eval_s, time_s, fps: wall-clock figures that differ
    between runs that are otherwise identical."""
    return name in ("time_s", "fps") or name.startswith("time/")


def metric_rows(run_dir: Path, *, with_time: bool = False) -> list[dict[str, str]]:
    """The rows of ``run_dir``/metrics.csv as written (strings), without the time columns unless
    ``with_time``: what two runs of the same seeded work must agree on."""
    with (Path(run_dir) / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    if with_time:
        return rows
    return [{k: v for k, v in r.items() if not is_time_column(k)} for r in rows]


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
