import os
import subprocess
import sys
from pathlib import Path

import fake_envs  # noqa: F401  (registers the fake envs)
import pytest
import torch
from hydra import compose, initialize_config_dir

from rltool.config import conf_dir, register_configs, to_config

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("WANDB_MODE", "disabled")
register_configs()  # the schemas make_cfg composes from (rltool train registers them itself)


def make_cfg(*overrides: str):
    """The typed config composed as the CLI would, with ``overrides``."""
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        return to_config(compose("config", overrides=list(overrides)))


def run_cli(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    """``python -m rltool <args>`` in a subprocess, with this checkout and tests/ importable."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(
        [sys.executable, "-m", "rltool", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)
    yield
