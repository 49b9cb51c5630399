"""Slow learning checks (pytest -m slow, a few minutes each): with the shipped defaults, a memory
policy solves masked CartPole in 100k frames while a memoryless one cannot, and an LSTM solves
plain CartPole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli


def _final_eval(tmp_path: Path, *overrides: str) -> float:
    run = tmp_path / "run"
    args = ["train", *overrides, "logger.progress=none", f"hydra.run.dir={run}"]
    r = run_cli(*args, cwd=tmp_path, timeout=None)
    assert r.returncode == 0, r.stderr
    return json.loads((run / "summary.json").read_text())["eval/return_mean"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole 100k-frame run
@pytest.mark.parametrize("policy", ["lstm", "gru"])
def test_memory_policy_solves_masked_cartpole(tmp_path, policy):
    assert _final_eval(tmp_path, "env=cartpole_pomdp", f"policy={policy}", "seed=0") >= 450


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole 100k-frame run
def test_mlp_fails_masked_cartpole(tmp_path):
    assert _final_eval(tmp_path, "env=cartpole_pomdp", "policy=mlp", "seed=0") < 200


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole 100k-frame run
def test_lstm_solves_cartpole(tmp_path):
    assert _final_eval(tmp_path, "env=cartpole", "policy=lstm", "seed=0") >= 475
