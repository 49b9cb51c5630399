"""Run folders written before the memory keys moved under ``policy.memory`` (tests/data/
legacy_runs, flat ``policy.trace_size`` etc. in their configs and checkpoints) still load,
evaluate and resume; :func:`rltool.memories.migrate` moves the run's own keys and drops the
others, and refuses a flat key that disagrees with its new place."""

from __future__ import annotations

import shutil

import gymnasium as gym
import pytest
from conftest import ROOT, metric_rows, run_cli
from omegaconf import OmegaConf

import rltool
from rltool.cli import main
from rltool.errors import EXIT_USAGE, ConfigError
from rltool.memories import MOVED, migrate
from rltool.run import checkpoint as ckpt

DATA = ROOT / "tests" / "data" / "legacy_runs"
# each fixture's memory keys, as the old code ran them (trace_size: ffm.yaml's 32, not 8 // 2)
MEMORY = {
    "ffm": {"trace_size": 32, "context_size": 4},
    "trxl": {"window": 16, "heads": 4, "gated": True, "gate_bias": 2.0},
    "gru": {"kernel": "torch"},
}


def _acts(run_dir) -> dict:
    """load_policy on ``run_dir`` acts 3 steps of CartPole; returns its carried state."""
    policy, state = rltool.load_policy(run_dir)
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        action, state = policy(obs, state)
        obs, *_ = env.step(int(action))
    return {k: tuple(v.shape) for k, v in state.items()}


@pytest.mark.parametrize("kind", sorted(MEMORY))
def test_an_old_run_loads_evaluates_and_resumes(kind, tmp_path):
    run = tmp_path / kind
    shutil.copytree(DATA / kind, run)
    assert "memory" not in OmegaConf.load(run / "config.yaml").policy  # written before the move
    shapes = _acts(run)
    if kind == "ffm":  # the stored trace size, not hidden_size // 2
        assert shapes["ffm_state"] == (1, 1, 2, 32, 4)
    assert main(["eval", f"run={run}", "episodes=1"]) == 0

    r = run_cli("train", f"resume={run}", "total_frames=2048", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert int(metric_rows(run)[-1]["frames"]) == 2048
    for saved in (
        OmegaConf.to_container(OmegaConf.load(run / "config.yaml")),
        ckpt.load(ckpt.latest(run / "checkpoints"))["config"],
    ):
        assert saved["policy"]["memory"] == MEMORY[kind]
        assert not set(MOVED) & set(saved["policy"])
    assert _acts(run) == shapes
    assert main(["eval", f"run={run}", "episodes=1"]) == 0


def _old(kind: str, **policy) -> dict:
    flat = {"trace_size": None, "context_size": 4, "memory_window": 16, "num_heads": 4}
    flat |= {"gated": True, "gate_bias": 2.0, "gru_kernel": "torch"}
    return {"seed": 0, "policy": {"kind": kind, "hidden_size": 8, **flat, **policy}}


def test_migrate_moves_the_runs_own_keys_and_drops_the_others():
    got = migrate(_old("trxl", num_heads=2))["policy"]
    assert got["memory"] == {"window": 16, "heads": 2, "gated": True, "gate_bias": 2.0}
    assert got["hidden_size"] == 8 and not set(MOVED) & set(got)
    assert migrate(_old("lstm"))["policy"]["memory"] == {}
    assert migrate(_old("mlp"))["policy"].get("memory") is None
    today = {"seed": 0, "policy": {"kind": "ffm", "memory": {"trace_size": 8}}}
    assert migrate(today) == today
    assert migrate({"seed": 0}) == {"seed": 0}


def test_a_flat_key_that_disagrees_with_its_new_place_is_one_line():
    config = _old("trxl", memory={"heads": 2})
    with pytest.raises(ConfigError) as err:
        migrate(config)
    msg = str(err.value)
    assert "policy.num_heads" in msg and "policy.memory.heads" in msg and "\n" not in msg


def test_an_old_key_on_the_command_line_names_its_new_place(tmp_path, capsys):
    args = ["train", "policy=trxl", "policy.num_heads=2", f"hydra.run.dir={tmp_path / 'run'}"]
    assert main(args) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'policy.num_heads': it moved to policy.memory.heads" in err[0]
    assert not (tmp_path / "run").exists()
