"""The env state protocol: save and restore episodes in progress.

Gymnasium has no generic way to save an env's state, so a single (non-vector) env takes part in
exact resume through a small protocol: ``get_state() -> dict`` of tensors and plain containers and
``set_state(state)``, defined on the env or on any wrapper around it. The built-in classic-control
envs used by rltool (CartPole, Pendulum) get it here by adapters. On top of that, every env saves
the ``TimeLimit`` elapsed-step counter and the bit generator state of its ``np_random``.

Envs without the protocol (and envs behind the async backend's worker processes) return ``None``:
a resumed run then starts fresh episodes, with a warning.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
import torch
from gymnasium.envs.classic_control.cartpole import CartPoleEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv
from gymnasium.wrappers import TimeLimit


def _array(x) -> torch.Tensor | None:
    return None if x is None else torch.from_numpy(np.array(x, dtype=np.float64))


def _numpy(t: torch.Tensor | None):
    return None if t is None else t.numpy().copy()


# built-in envs: the attributes that hold an episode's state
_BUILTIN = {
    CartPoleEnv: (
        lambda e: {"state": _array(e.state), "steps_beyond_terminated": e.steps_beyond_terminated},
        lambda e, s: (
            setattr(e, "state", _numpy(s["state"])),
            setattr(e, "steps_beyond_terminated", s["steps_beyond_terminated"]),
        ),
    ),
    PendulumEnv: (
        lambda e: {
            "state": _array(e.state),
            "last_u": None if e.last_u is None else float(e.last_u),
        },
        lambda e, s: (setattr(e, "state", _numpy(s["state"])), setattr(e, "last_u", s["last_u"])),
    ),
}


def _layers(env: gym.Env) -> list:
    out = [env]
    while isinstance(out[-1], gym.Wrapper):
        out.append(out[-1].env)
    return out


def _protocol(env: gym.Env):
    """(get, set) for the core state of ``env``, or None when it has none."""
    for layer in _layers(env):
        cls = type(layer)
        if callable(getattr(cls, "get_state", None)) and callable(getattr(cls, "set_state", None)):
            return layer.get_state, layer.set_state
    unwrapped = env.unwrapped
    for cls, (get, put) in _BUILTIN.items():
        if type(unwrapped) is cls:
            return functools.partial(get, unwrapped), functools.partial(put, unwrapped)
    return None


def _rng_state(env: gym.Env):
    rng = env.unwrapped._np_random  # None until seeded
    if rng is None:
        return None
    state = dict(rng.bit_generator.state)
    return {
        k: torch.from_numpy(v.copy()) if isinstance(v, np.ndarray) else v for k, v in state.items()
    }


def _set_rng_state(env: gym.Env, state) -> None:
    if state is None:
        return
    state = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in state.items()}
    if env.unwrapped._np_random is None:
        env.unwrapped._np_random = np.random.Generator(getattr(np.random, state["bit_generator"])())
    env.unwrapped._np_random.bit_generator.state = state


def get_env_state(env: gym.Env) -> dict | None:
    """The state of one (wrapped) env, or None when it does not implement the protocol."""
    proto = _protocol(env)
    if proto is None:
        return None
    limits = [w._elapsed_steps for w in _layers(env) if isinstance(w, TimeLimit)]
    return {"core": proto[0](), "time_limit": limits, "np_random": _rng_state(env)}


def set_env_state(env: gym.Env, state: dict) -> None:
    """Restores what :func:`get_env_state` returned (onto an env built from the same config)."""
    proto = _protocol(env)
    if proto is None:
        raise ValueError(f"{env} does not implement get_state / set_state")
    proto[1](state["core"])
    for wrapper, elapsed in zip(
        [w for w in _layers(env) if isinstance(w, TimeLimit)], state["time_limit"], strict=True
    ):
        wrapper._elapsed_steps = elapsed
    _set_rng_state(env, state["np_random"])
