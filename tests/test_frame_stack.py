"""env.frame_stack: the last k observations on a new first axis, on any gymnasium env."""

from __future__ import annotations

import torch

from rltool.config import EnvConfig
from rltool.envs import make_env


def test_frame_stack_stacks_the_last_observations():
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=2, frame_stack=3))
    try:
        obs = env.reset_tensors(seed=0)
        assert obs.shape == (2, 3, 4)
        assert torch.equal(obs[:, 0], obs[:, 2])  # padded with the reset observation (gymnasium)
        step = env.step_tensors(torch.zeros(2, dtype=torch.int64)).observation
        assert torch.equal(step[:, 1], obs[:, 2])  # shifted by one
    finally:
        env.close()
