"""Builders shared by the recurrent collector / PPO tests: masked CartPole, small recurrent
policies, a user's own memory module (no LSTM/GRU in it) and a tiny time-limited walk env."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from torch import nn

from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.envs.vector import VectorEnv
from rltool.modules import make_policy
from rltool.modules.recurrent import RecurrentModule
from rltool.specs import Spec

PREV = ["observation", "prev_action", "prev_reward"]


def masked_cartpole(num_envs: int = 4) -> VectorEnv:
    """CartPole-v1 with the velocities hidden (the cartpole_pomdp env)."""
    return make_env(EnvConfig(num_envs=num_envs, obs_keep=[0, 2]))


def policy_cfg(kind: str, shared: bool = False, inputs=PREV, **kw) -> PolicyConfig:
    return PolicyConfig(
        kind=kind,
        hidden_size=16,
        hidden_sizes=[16],
        encoder_sizes=[8],
        shared_torso=shared,
        inputs=list(inputs),
        activation="relu",
        **kw,
    )


def recurrent_policy(kind: str, specs, shared: bool = False, seed: int = 0, **kw):
    """A small LSTM / GRU / user-memory ("sum") actor-critic with prev_action/prev_reward inputs."""
    torch.manual_seed(seed)
    if kind == "sum":  # a recurrent kind lets prev_action/prev_reward pass the config check
        return make_policy(policy_cfg("gru", shared, **kw), specs, memory=RunningSumMemory)
    return make_policy(policy_cfg(kind, shared, **kw), specs)


class RunningSumMemory(nn.Module):
    """A user's memory, no RNN inside: a float64 "map" [2, H] (row 0: a running sum of projected
    inputs, row 1: their running max) and an int64 step count [1], under nested keys. Output
    y = tanh(sum / count + max) [.., H]. Its time-dim path is a plain loop of steps."""

    mode = RecurrentModule.mode  # follows recurrent_mode(...) like the built-in modules

    def __init__(self, input_size: int, state_prefix: str = "", hidden_size: int = 6):
        super().__init__()
        self.proj = nn.Linear(input_size, hidden_size)
        self.hidden_size = hidden_size
        self.state_keys = [(state_prefix + "memory", "map"), (state_prefix + "memory", "count")]
        self.default_mode, self.force_sequential = "sequential", False

    @property
    def state_specs(self) -> dict:
        grid, count = self.state_keys
        return {grid: Spec((2, self.hidden_size), torch.float64), count: Spec((1,), torch.int64)}

    def _step(self, x, states, is_init):
        lead = is_init.shape[:-1]
        grid, count = (
            s.masked_fill(is_init.view(*lead, *[1] * (s.dim() - len(lead))), 0) for s in states
        )
        p = self.proj(x).double()
        first = count == 0
        run_sum = grid[..., 0, :] + p
        run_max = torch.where(first, p, torch.maximum(grid[..., 1, :], p))
        count = count + 1
        y = torch.tanh(run_sum / count + run_max).to(x.dtype)
        return y, (torch.stack([run_sum, run_max], -2), count)

    def run(self, x, states, is_init, time_dim: bool, need_states: bool = True):
        if not time_dim:
            return self._step(x, states, is_init)
        ys, nxts = [], []
        for t in range(x.shape[0]):
            y, states = self._step(x[t], states, is_init[t])
            ys.append(y)
            nxts.append(states)
        return torch.stack(ys), tuple(torch.stack(s) for s in zip(*nxts, strict=True))


class Walk(gym.Env):
    """A 1-D walk that never terminates: obs [x, t/5], action 0/1 moves x by -/+0.5, reward x."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.x, self.t = float(self.np_random.uniform(-1, 1)), 0
        return self._obs(), {}

    def step(self, action):
        self.x += 0.5 if action else -0.5
        self.t += 1
        return self._obs(), self.x, False, False, {}

    def _obs(self):
        return np.array([self.x, self.t / 5], dtype=np.float32)


def time_limited_walk(num_envs: int = 2, limit: int = 5) -> VectorEnv:
    """``Walk`` truncated every ``limit`` steps by gymnasium's TimeLimit."""
    fns = [lambda: gym.wrappers.TimeLimit(Walk(), limit)] * num_envs
    return VectorEnv(SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP))


def recording_step(opt, steps: list):
    """A PPO ``step(terms, apply=True)`` for tests: one Adam step on the sum of the ``loss_*``
    terms, every call's terms appended to ``steps`` (detached copies)."""

    def step(terms, apply=True):
        opt.zero_grad()
        sum(v for k, v in terms.items() if k.startswith("loss_")).backward()
        opt.step()
        steps.append({k: v.detach().clone() for k, v in terms.items()})

    return step
