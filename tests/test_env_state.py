"""The env state protocol: an env restored mid-episode continues exactly."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rltool.config import EnvConfig
from rltool.envs import make_env
from rltool.envs.state import get_env_state


def _actions(env, n: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    spec = env.specs.action
    if spec.discrete:
        return [torch.randint(spec.n, (env.num_envs,), generator=g) for _ in range(n)]
    return [4 * torch.rand(env.num_envs, *spec.shape, generator=g) - 2 for _ in range(n)]


def _play(env, actions) -> list[tuple]:
    return [tuple(t.clone() for t in env.step_tensors(a)) for a in actions]


CASES = {
    "cartpole": EnvConfig(id="CartPole-v1", num_envs=3, max_episode_steps=30),
    "cartpole_masked": EnvConfig(
        id="CartPole-v1", num_envs=3, obs_keep=[0, 2], normalize_obs=True, normalize_reward=True
    ),
    "pendulum": EnvConfig(id="Pendulum-v1", num_envs=2, max_episode_steps=25),
}


@pytest.mark.parametrize("name", CASES)
def test_restored_env_continues_exactly(name):
    """Steps an env into its episodes, saves, plays on (through time limits, terminations and
    seeded resets); a fresh env given the state plays the same actions identically."""
    cfg = CASES[name]
    env = make_env(cfg, gamma=0.9)
    env.reset_tensors(seed=3)
    _play(env, _actions(env, 17, seed=0))
    state = env.get_state()
    norms = [n for n in (env.obs_norm, env.reward_scaler) if n is not None]
    stats = [n.state_dict() for n in norms]  # the checkpoint saves these beside the env state
    assert any(s["time_limit"][0] > 0 for s in state["envs"]), "mid-episode"
    later = _actions(env, 80, seed=1)  # long enough for every env to end an episode
    expected = _play(env, later)
    assert torch.cat([r[5] for r in expected]).any(), "episodes ended"

    fresh = make_env(cfg, gamma=0.9)
    fresh.reset_tensors(seed=99)  # a different past: the state must override all of it
    for n, st in zip([n for n in (fresh.obs_norm, fresh.reward_scaler) if n], stats, strict=True):
        n.load_state_dict(st)
    fresh.set_state(state)
    got = _play(fresh, later)
    for e, g in zip(expected, got, strict=True):
        for a, b in zip(e, g, strict=True):
            assert torch.equal(a, b)
    env.close()
    fresh.close()


class Counter(gym.Env):
    """A user env with the protocol: the observation counts steps."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.n = 0
        return np.array([0.0], np.float32), {}

    def step(self, action):
        self.n += 1
        return np.array([self.n], np.float32), 1.0, self.n >= 5, False, {}

    def get_state(self):
        return {"n": self.n}

    def set_state(self, state):
        self.n = state["n"]


class NoState(Counter):
    get_state = None
    set_state = None


def test_a_user_env_takes_part_and_one_without_the_protocol_opts_out():
    gym.register("RltoolTestCounter-v0", entry_point=Counter)
    gym.register("RltoolTestNoState-v0", entry_point=NoState)
    env = make_env(EnvConfig(id="RltoolTestCounter-v0", num_envs=2))
    env.reset_tensors(seed=0)
    env.step_tensors(torch.tensor([0, 1]))
    state = env.get_state()
    assert [s["core"] for s in state["envs"]] == [{"n": 1}, {"n": 1}]
    plain = make_env(EnvConfig(id="RltoolTestNoState-v0", num_envs=2))
    plain.reset_tensors(seed=0)
    assert plain.get_state() is None
    assert get_env_state(gym.make("RltoolTestNoState-v0")) is None
    asynchronous = make_env(EnvConfig(id="CartPole-v1", num_envs=2, backend="async"))
    asynchronous.reset_tensors(seed=0)
    assert asynchronous.get_state() is None  # the workers hold the envs
    for e in (env, plain, asynchronous):
        e.close()
