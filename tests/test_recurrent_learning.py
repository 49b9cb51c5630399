"""Slow learning checks (pytest -m slow, a few minutes each): with the shipped defaults, a memory
policy solves masked CartPole in 100k frames while a memoryless one cannot, and an LSTM solves
plain CartPole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _final_eval(tmp_path: Path, *overrides: str) -> float:
    run = tmp_path / "run"
    cmd = [sys.executable, "-m", "rltool", "train", *overrides, "logger.progress=none"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([*cmd, f"hydra.run.dir={run}"], check=True, cwd=tmp_path, env=env)
    return json.loads((run / "summary.json").read_text())["eval/return_mean"]


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["lstm", "gru"])
def test_memory_policy_solves_masked_cartpole(tmp_path, policy):
    assert _final_eval(tmp_path, "env=cartpole_pomdp", f"policy={policy}", "seed=0") >= 450


@pytest.mark.slow
def test_mlp_fails_masked_cartpole(tmp_path):
    assert _final_eval(tmp_path, "env=cartpole_pomdp", "policy=mlp", "seed=0") < 200


@pytest.mark.slow
def test_lstm_solves_cartpole(tmp_path):
    assert _final_eval(tmp_path, "env=cartpole", "policy=lstm", "seed=0") >= 475
