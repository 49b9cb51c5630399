"""bench_ppo.py's TorchRL peer runs rltool's lstm case: the settings it gets are that case's (one
source: the config rltool trains), and its env side (scripts/peer_torchrl.py, which cannot import
rltool) gives rltool's observations and rewards. Needs no torchrl: CI builds no peer venv."""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
import torch
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import bench_ppo  # noqa: E402
import bench_torchrl  # noqa: E402
import peer_torchrl  # noqa: E402

from rltool.envs import make_env  # noqa: E402
from rltool.envs.normalize import RunningMeanStd  # noqa: E402


@pytest.fixture(scope="module")
def cfg():
    return bench_ppo.rltool_config("lstm", 3, 100_000, 5_000)


@pytest.fixture(scope="module")
def settings(cfg):
    return bench_torchrl.torchrl_settings(cfg, 3, 100_000, 5_000)


def test_the_peer_takes_exactly_the_settings_bench_ppo_writes(settings):
    assert set(settings) == {f.name for f in dataclasses.fields(peer_torchrl.Settings)}
    s = peer_torchrl.Settings(**json.loads(json.dumps(settings)))  # as the command line carries it
    assert dataclasses.asdict(s) == settings
    assert "torchrl" not in sys.modules  # importing the peer needs no torchrl


def test_the_settings_are_the_lstm_case(settings):
    z = bench_ppo.ZOO
    assert {k: settings[k] for k in ("num_envs", "steps", "epochs", "gamma", "lam", "lr")} == {
        k: z[k] for k in ("num_envs", "steps", "epochs", "gamma", "lam", "lr")
    }
    assert settings["num_minibatches"] == z["num_envs"] * z["steps"] // z["batch"]
    assert (settings["clip"], settings["ent"], settings["vf"]) == (z["clip"], z["ent"], z["vf"])
    assert settings["max_grad_norm"] == z["max_grad_norm"]
    assert settings["anneal_lr"] and settings["anneal_clip"] and settings["normalize_advantage"]
    assert not settings["refresh_states"]
    widths = {
        k: settings[k] for k in ("hidden_size", "num_layers", "encoder_sizes", "hidden_sizes")
    }
    assert widths == {"hidden_size": 64, "num_layers": 1, "encoder_sizes": [], "hidden_sizes": [64]}
    assert (settings["activation"], settings["shared_torso"]) == ("relu", False)
    assert (settings["env_id"], settings["obs_keep"]) == ("CartPole-v1", [0, 2])
    assert (settings["seed"], settings["frames"], settings["num_threads"]) == (3, 100_000, 1)


@pytest.mark.parametrize(
    "change, error",
    [
        ({"shared_torso": True}, ValueError),
        ({"num_minibatches": 3}, ValueError),
        ({"x": 1}, TypeError),
    ],
)
def test_the_peer_refuses_what_it_does_not_run(settings, change, error):
    with pytest.raises(error):
        peer_torchrl.Settings(**(settings | change))


def test_its_running_statistics_are_rltools():
    rng = np.random.default_rng(0)
    ours, theirs = RunningMeanStd((2,)), peer_torchrl.RunningMeanStd((2,))
    for n in (8, 8, 3, 8):
        x = rng.normal(2.0, 3.0, (n, 2))
        ours.update(x)
        theirs.update(x)
    np.testing.assert_allclose(theirs.mean, ours.mean, rtol=1e-12)
    np.testing.assert_allclose(theirs.var, ours.var, rtol=1e-12)
    assert theirs.count == ours.count


def test_its_env_gives_rltools_observations_and_rewards(cfg, settings):
    """Same seed, same actions, up to the first episode end (the two reset differently there:
    rltool in gymnasium's SAME_STEP mode, the peer as TorchRL resets, DISABLED)."""
    s = peer_torchrl.Settings(**settings)
    ours = make_env(cfg.env, gamma=cfg.loss.gamma)
    theirs = peer_torchrl.vector_env(s, s.num_envs)
    obs, _ = theirs.reset(seed=7)
    torch.testing.assert_close(torch.from_numpy(obs), ours.reset_tensors(seed=7))
    for t in range(6):
        action = np.arange(s.num_envs) % 2 ^ (t % 2)
        step = ours.step_tensors(torch.from_numpy(action))
        obs, rew, term, trunc, _ = theirs.step(action)
        assert not (term | trunc).any()
        torch.testing.assert_close(torch.from_numpy(obs), step.observation)
        torch.testing.assert_close(torch.from_numpy(rew), step.reward[:, 0])
    assert obs.shape == (s.num_envs, 2)
    ours.close()
    theirs.close()
