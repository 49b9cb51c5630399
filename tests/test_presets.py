"""env=popgym and env=minigrid: short ids resolved, the previous action an input of every policy
on POPGym (mlp included), a smoke run per preset and space kind, and a resumed POPGym run warning
that its episodes start fresh (POPGym envs cannot save their state)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import make_cfg, metric_rows

from rltool import errors
from rltool.cli import main
from rltool.config import EnvConfig
from rltool.config.store import conf_dir
from rltool.envs import factory
from rltool.envs.factory import resolve_id
from rltool.errors import ConfigError

pytest.importorskip("popgym")
pytest.importorskip("minigrid")

TINY = [
    "train",
    "env.num_envs=2",
    "collector.frames_per_batch=64",
    "total_frames=128",
    "eval.every_frames=128",
    "eval.episodes=1",
    "eval.final_episodes=1",  # not 50: MiniGrid's untrained episodes run to their step limit
    "logger.progress=none",
    "policy.hidden_size=8",
]


@pytest.mark.parametrize(
    ("suite", "given", "want"),
    [
        ("popgym", "RepeatPreviousEasy", "popgym:popgym-RepeatPreviousEasy-v0"),
        ("popgym", "popgym-AutoencodeEasy-v0", "popgym:popgym-AutoencodeEasy-v0"),
        ("popgym", "popgym:popgym-CountRecallEasy-v0", "popgym:popgym-CountRecallEasy-v0"),
        ("minigrid", "MemoryS7", "minigrid:MiniGrid-MemoryS7-v0"),
        ("gym", "CartPole-v1", "CartPole-v1"),
    ],
)
def test_short_and_full_ids(suite, given, want):
    assert resolve_id(EnvConfig(id=given, suite=suite)) == want


def test_a_missing_suite_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(factory.SUITES, "popgym", ("no_such_popgym", "popgym-{}-v0"))
    with pytest.raises(ConfigError, match=r"pip install 'rltool\[popgym\]'"):
        resolve_id(EnvConfig(id="RepeatPreviousEasy", suite="popgym"))


def test_an_unknown_task_lists_some_names():
    with pytest.raises(ConfigError, match="env=popgym has no task env.id='Nope'.*AutoencodeEasy"):
        resolve_id(EnvConfig(id="Nope", suite="popgym"))


@pytest.mark.parametrize(
    "policy", sorted(p.stem for p in (Path(conf_dir()) / "policy").glob("*.yaml"))
)
def test_popgym_feeds_the_previous_action_to_every_policy(policy):
    cfg = make_cfg("env=popgym", f"policy={policy}")
    assert list(cfg.policy.inputs) == ["observation", "prev_action"]
    assert cfg.env.id == "RepeatPreviousEasy"
    off = make_cfg("env=popgym", f"policy={policy}", "policy.inputs=[observation]")
    assert list(off.policy.inputs) == ["observation"]


def test_minigrid_preset_sees_image_and_direction():
    cfg = make_cfg("env=minigrid")
    assert cfg.env.image == "symbolic" and list(cfg.env.obs_keys) == ["image", "direction"]


@pytest.mark.parametrize(
    "args",
    [
        ["env=popgym", "policy=mlp"],  # Discrete observation
        ["env=popgym", "env.id=AutoencodeEasy", "policy=gru"],  # Tuple observation
        ["env=popgym", "env.id=BattleshipEasy", "policy=lstm"],  # MultiDiscrete actions
        ["env=minigrid", "policy=lstm", "policy.cnn_features=16"],  # Dict: symbolic image
    ],
)
def test_smoke(args, tmp_path):
    assert main([*TINY, *args, f"hydra.run.dir={tmp_path}"]) == 0
    rows = metric_rows(tmp_path)
    assert rows[-1]["frames"] == "128" and rows[-1]["eval/return_mean"] != ""


def test_a_resumed_popgym_run_warns_that_episodes_start_fresh(tmp_path, monkeypatch, capsys):
    args = [*TINY, "env=popgym", "policy=gru", "checkpoint.every_frames=64"]
    assert main([*args, f"hydra.run.dir={tmp_path}"]) == 0
    monkeypatch.setattr(errors, "_WARNED", set())
    capsys.readouterr()
    assert main(["train", f"resume={tmp_path}", "total_frames=192"]) == 0
    err = capsys.readouterr().err
    assert "rltool: warning: env RepeatPreviousEasy cannot save its state" in err
    assert metric_rows(tmp_path)[-1]["frames"] == "192"


def test_minigrid_runs_on_the_async_backend_without_shared_memory():
    from rltool.envs import make_env

    cfg = make_cfg("env=minigrid", "env.backend=async", "env.num_envs=2").env
    env = make_env(cfg)
    try:
        assert not env.vec_env.shared_memory  # the mission text has no shared-memory layout
        obs = env.reset_tensors(seed=0)
        assert obs["image"].dtype == torch.uint8 and obs["image"].shape == (2, 7, 7, 3)
        r = env.step_tensors(torch.zeros(2, dtype=torch.int64))
        assert r.observation["direction"].shape == (2,)
    finally:
        env.close()
