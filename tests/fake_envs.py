"""Tiny envs with known dynamics for the tests (importable by async workers: tests/ is on the path).

FakeCount: observation [t, k] where t counts steps since the reset and k counts resets of this env;
reward 1 + action; terminates when t == terminate_at (if set); truncation comes from TimeLimit
(max_episode_steps)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountEnv(gym.Env):
    def __init__(self, terminate_at: int | None = None, continuous: bool = False):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = (
            gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        )
        self.terminate_at, self.t, self.k = terminate_at, 0, -1

    def _obs(self):
        return np.array([self.t, self.k], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.k = 0, self.k + 1
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = 1.0 + float(np.asarray(action).reshape(-1)[0])
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), reward, terminated, False, {}


class DiscreteObsEnv(gym.Env):
    """Observation Discrete(3) cycling 0, 1, 2; never ends."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return self.t % 3, 0.0, False, False, {}


class DictObsEnv(DiscreteObsEnv):
    observation_space = gym.spaces.Dict({"a": gym.spaces.Discrete(2)})


def register() -> None:
    for name, cls in [
        ("FakeCount-v0", CountEnv),
        ("FakeDiscreteObs-v0", DiscreteObsEnv),
        ("FakeDictObs-v0", DictObsEnv),
    ]:
        if name not in gym.registry:
            gym.register(name, entry_point=f"{__name__}:{cls.__name__}")


register()
