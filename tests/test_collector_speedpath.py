"""The collector's hot path: the same numbers as the TensorDict path for recurrent policies too,
and no device move when all devices are one."""

import pytest
import torch
from test_collector import collect

from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.modules import make_policy

ENVS = [
    EnvConfig(id="CartPole-v1", num_envs=3),
    EnvConfig(id="FakeCount-v0", num_envs=2, kwargs={"terminate_at": 3}, max_episode_steps=5),
    EnvConfig(id="FakeCount-v0", num_envs=2, kwargs={"continuous": True}, max_episode_steps=3),
]
POLICIES = [
    PolicyConfig(kind="lstm", hidden_size=16),
    PolicyConfig(kind="gru", hidden_size=16, inputs=["observation", "prev_action", "prev_reward"]),
    PolicyConfig(kind="lstm", hidden_size=8, num_layers=2, shared_torso=True),
    PolicyConfig(kind="mingru", hidden_size=8, num_layers=2),
    PolicyConfig(kind="ffm", hidden_size=8, inputs=["observation", "prev_action"]),
    PolicyConfig(kind="trxl", hidden_size=8, memory={"window": 3}, shared_torso=True),
]
IDS = ["lstm", "gru-inputs", "lstm2-shared", "mingru2", "ffm-inputs", "trxl-shared"]


@pytest.mark.parametrize("policy_cfg", POLICIES, ids=IDS)
@pytest.mark.parametrize("env_cfg", ENVS, ids=["cartpole", "terminate", "truncate-continuous"])
def test_recurrent_tensor_and_tensordict_paths_give_identical_rollouts(env_cfg, policy_cfg):
    a, _ = collect(False, env_cfg, policy_cfg)
    b, _ = collect(True, env_cfg, policy_cfg)
    for x, y in zip(a, b, strict=True):
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for k in x.keys(True, True):
            assert torch.equal(x[k], y[k]), k


@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_no_device_move_on_one_device(kind, monkeypatch):
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=2))
    c = Collector(env, make_policy(PolicyConfig(kind=kind), env.specs), 2 * 16, seed=0)
    calls = []
    to = torch.Tensor.to
    monkeypatch.setattr(
        torch.Tensor, "to", lambda self, *a, **k: calls.append(a) or to(self, *a, **k)
    )
    c.collect()
    assert len(calls) <= 1, calls  # at most the bootstrap value, once per rollout of 16 steps
    env.close()
