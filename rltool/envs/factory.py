"""``make_env``: an env config -> a :class:`VectorEnv`."""

from __future__ import annotations

import functools
import importlib
import os
import sys

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rltool.config import EnvConfig
from rltool.envs.normalize import ObsNormalizer, RewardScaler
from rltool.envs.vector import VectorEnv, observation_spec
from rltool.errors import ConfigError


def _import_path(cwd: str) -> None:
    # a user's "my_module:MyEnv-v0" lives in the working directory, also for async workers
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def check_env_id(env_id: str) -> None:
    """Raise ConfigError unless ``env_id`` names a registered env (importing ``module:`` first)."""
    _import_path(os.getcwd())
    if ":" in env_id:
        module = env_id.split(":", 1)[0]
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(
                f"env.id={env_id!r}: cannot import module {module!r} ({e}); run from "
                "the folder that holds it or add it to PYTHONPATH"
            ) from None
    try:
        gym.spec(env_id.split(":", 1)[-1])
    except gym.error.Error as e:
        raise ConfigError(
            f"env.id={env_id!r} is not a registered gymnasium env ({e}); use a "
            "registered id such as CartPole-v1, or module:EnvName-v0"
        ) from None


def _make_one(env_id: str, kwargs: dict, max_episode_steps: int | None, cwd: str) -> gym.Env:
    _import_path(cwd)
    extra = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    return gym.make(env_id, **kwargs, **extra)


def make_env(
    cfg: EnvConfig,
    *,
    gamma: float = 0.99,
    num_envs: int | None = None,
    obs_norm: ObsNormalizer | None = None,
    training: bool = True,
    backend: str | None = None,
    device: str = "cpu",
) -> VectorEnv:
    """Build the vector env of ``cfg``. An eval env passes the train env's ``obs_norm`` and
    ``training=False``: it shares the statistics, frozen, and never scales rewards."""
    check_env_id(cfg.id)
    n = num_envs or cfg.num_envs
    fn = functools.partial(_make_one, cfg.id, dict(cfg.kwargs), cfg.max_episode_steps, os.getcwd())
    try:
        probe = fn()
    except Exception as e:  # a bad kwarg or a broken user env: say which
        raise ConfigError(
            f"env.id={cfg.id!r} with env.kwargs={dict(cfg.kwargs)} failed to "
            f"build: {type(e).__name__}: {e}"
        ) from None
    obs_spec, _ = observation_spec(probe.observation_space, cfg.obs_keep)
    probe.close()
    vec_cls = AsyncVectorEnv if (backend or cfg.backend) == "async" else SyncVectorEnv
    vec = vec_cls([fn] * n, autoreset_mode=AutoresetMode.SAME_STEP)
    if cfg.normalize_obs and obs_norm is None:
        obs_norm = ObsNormalizer(obs_spec.shape, clip=cfg.clip_obs)
    scaler = RewardScaler(n, gamma) if cfg.normalize_reward and training else None
    env = VectorEnv(vec, cfg.obs_keep, obs_norm if cfg.normalize_obs else None, scaler, device)
    env.set_training(training)
    return env
