"""A run on a Dict observation with an image and MultiDiscrete actions, end to end as a user runs
it: train (checkpoints hold plain tensors: loaded with weights_only=True), a run killed and
resumed matching the straight run row for row (the carried nested observation restored), ``rltool
eval`` and ``rltool.load_policy`` reproducing eval's actions. The image encoders: the small stack
below 64 px, Nature-DQN from 64 px up."""

from __future__ import annotations

import signal

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import metric_rows, run_cli

import rltool
from rltool.cli import main
from rltool.config import EnvConfig, PolicyConfig
from rltool.deploy.inference import restore
from rltool.envs import make_env
from rltool.errors import ConfigError
from rltool.modules import make_policy
from rltool.run import checkpoint as ckpt
from rltool.run.evaluation import run_episodes

ARGS = [
    "train",
    "env=gym",
    "env.id=fake_envs:FakeNested-v0",
    "seed=5",
    "+env.kwargs={multi:true,terminate_at:6}",
    "env.max_episode_steps=5",
    "env.num_envs=2",
    "env.normalize_obs=true",
    "policy=lstm",
    "policy.hidden_size=8",
    "policy.cnn_features=8",
    "policy.inputs=[observation,prev_action]",
    "collector.frames_per_batch=64",
    "checkpoint.every_frames=64",
    "eval.every_frames=128",
    "eval.episodes=2",
    "logger.progress=none",
]


@pytest.fixture(scope="module")
def nested_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("nested") / "run"
    assert main([*ARGS, "total_frames=128", f"hydra.run.dir={run}"]) == 0
    return run


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
def test_killed_and_resumed_run_matches_the_straight_run(tmp_path):
    straight, run = tmp_path / "straight", tmp_path / "run"
    args = [*ARGS, "total_frames=256"]
    assert run_cli(*args, f"hydra.run.dir={straight}", cwd=tmp_path).returncode == 0
    # killed while writing its 2nd checkpoint (128 frames): resumed from the 1st (64 frames)
    kill = {"RLTOOL_CHECKPOINT_KILL": "after_temp_write@2"}
    r = run_cli(*args, f"hydra.run.dir={run}", cwd=tmp_path, env=kill)
    assert r.returncode == -signal.SIGKILL
    root = ckpt.load(ckpt.latest(run / "checkpoints"))["state"]["episodes"]["collector"]["root"]
    assert root["observation"]["image"].dtype == torch.uint8  # saved nested, plain tensors
    r = run_cli("train", f"resume={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cannot save its state" not in r.stderr
    assert metric_rows(run) == metric_rows(straight)


def test_eval_and_load_policy_agree_step_for_step(nested_run, capsys):
    assert main(["eval", f"run={nested_run}", "episodes=2"]) == 0
    restored = restore(nested_run)
    env = restored.make_env(1)
    trace: list[torch.Tensor] = []
    (ret,), (length,) = run_episodes(restored.policy, env, seed=11, episodes=1, trace=trace)
    env.close()
    eval_actions = [a[0].tolist() for a in trace[:length]]
    policy, state = rltool.load_policy(nested_run)
    genv = gym.make("fake_envs:FakeNested-v0", multi=True, terminate_at=6, max_episode_steps=5)
    obs, _ = genv.reset(seed=11)
    actions, total = [], 0.0
    while True:
        action, state = policy(obs, state)
        assert action.shape == (2,)
        actions.append(action.tolist())
        obs, reward, terminated, truncated, _ = genv.step(action)
        total += reward
        if terminated or truncated:
            break
    assert actions == eval_actions and total == ret
    # a batch of observations: one action row each
    batch = {k: np.stack([v, v]) for k, v in obs.items() if k != "mission"}
    actions, _ = policy(batch, policy.initial_state(2))
    assert actions.shape == (2, 2)


def _image_policy(size: int, **kw):
    cfg = EnvConfig(id="FakeNested-v0", num_envs=1, kwargs={"size": size}, obs_keys=["image"])
    env = make_env(cfg)
    return make_policy(PolicyConfig(**kw), env.specs), env


def test_the_cnn_follows_the_image_size_and_can_be_overridden():
    small, _ = _image_policy(7)
    assert small.encoder.images["image"].convs[0].kernel_size == (2, 2)
    nature, env = _image_policy(64)
    assert nature.encoder.images["image"].convs[0].kernel_size == (8, 8)
    is_init = torch.ones(1, 1, dtype=torch.bool)
    out, _ = nature.act({"observation": env.reset_tensors(seed=0)}, {}, is_init)
    assert out["action"].shape == (1,)
    forced, _ = _image_policy(64, cnn="small")
    assert forced.encoder.images["image"].convs[0].kernel_size == (2, 2)
    with pytest.raises(ConfigError, match="policy.cnn=nature needs images of at least 36x36"):
        _image_policy(7, cnn="nature")


def test_a_flat_image_stays_uint8_unnormalised_and_goes_through_the_cnn():
    cfg = EnvConfig(id="FakeFlatImage-v0", num_envs=2, normalize_obs=True)
    env = make_env(cfg)
    assert env.obs_norm is None  # running statistics are for float Box entries only
    obs = env.reset_tensors(seed=0)
    assert obs.dtype == torch.uint8 and obs.shape == (2, 6, 6, 2)
    obs = env.step_tensors(torch.zeros(2, dtype=torch.int64)).observation
    assert obs.eq(1).all()  # t = 1 of episode 0, raw
    policy = make_policy(PolicyConfig(cnn_features=4), env.specs)
    assert not policy.encoder.plain and policy.encoder.out_features == 4
    out, _ = policy.act({"observation": obs}, {}, torch.zeros(2, 1, dtype=torch.bool))
    assert out["action"].shape == (2,)
