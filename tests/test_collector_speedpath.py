"""The collector's hot path: no device move when all devices are one. (Its numbers equal the
TensorDict path's, load_policy's and the exported step's: tests/test_step_paths.py.)"""

import pytest
import torch

from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.modules import make_policy


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
