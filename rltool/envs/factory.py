"""``make_env``: an env config -> a :class:`VectorEnv`."""

from __future__ import annotations

import functools
import importlib
import multiprocessing
import os
import sys

import gymnasium as gym
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rltool.config import ENV_SUITES, EnvConfig
from rltool.envs import masks
from rltool.envs.envpool_vec import EnvPoolVectorEnv
from rltool.envs.normalize import ObsNormalizer, RewardScaler, make_obs_normalizer
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


SUITES = ENV_SUITES  # a suite's package and how a short id becomes a full one


def resolve_id(cfg: EnvConfig) -> str:
    """The gymnasium id of ``cfg``: ``env.id`` as given, or a suite's short name made full
    (``RepeatPreviousEasy`` -> ``popgym:popgym-RepeatPreviousEasy-v0``); a suite whose package is
    missing is bad input naming the extra to install."""
    if SUITES[cfg.suite] is None:  # gym: the id as given
        return cfg.id
    module, pattern = SUITES[cfg.suite]
    try:
        importlib.import_module(module)
    except ImportError:
        raise ConfigError(
            f"env={cfg.suite} needs the {module} package: pip install 'rltool[{cfg.suite}]'"
        ) from None
    if ":" in cfg.id:
        return cfg.id
    prefix = pattern.split("{")[0]
    name = cfg.id if cfg.id.startswith(prefix) else pattern.format(cfg.id)
    if name not in gym.registry:
        tasks = sorted(k[len(prefix) : -3] for k in gym.registry if k.startswith(prefix))
        raise ConfigError(
            f"env={cfg.suite} has no task env.id={cfg.id!r} ({name}): choose one of "
            f"{', '.join(tasks[:6])}, ... ({len(tasks)} in all, the names of gymnasium's "
            f"registry starting with {prefix!r})"
        )
    return f"{module}:{name}"


def one_thread_per_worker() -> None:
    """An async worker steps one env: one thread for torch, OpenMP and the BLAS libraries, so that
    N workers and the main process's ``num_threads`` do not oversubscribe the cores. Nothing
    changes in the main process (gymnasium builds one env there to read the spaces)."""
    if multiprocessing.parent_process() is None:
        return
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = "1"
    if "torch" in sys.modules:  # forked workers inherit the parent's torch thread pool size
        sys.modules["torch"].set_num_threads(1)


# gymnasium's standard Atari preprocessing (Machado et al. 2018 with v5's sticky actions): up to
# 30 no-ops at reset, the action repeated on 4 frames and the last two max-pooled, 84x84
# grayscale uint8, no episode end on a life lost; the base env steps single frames for it
ATARI = {
    "noop_max": 30,
    "frame_skip": 4,
    "screen_size": 84,
    "grayscale_obs": True,
    "scale_obs": False,
    "terminal_on_life_loss": False,
}


def _make_one(
    env_id: str,
    kwargs: dict,
    max_episode_steps: int | None,
    cwd: str,
    worker: bool = False,
    suite: str = "gym",
    frame_stack: int = 1,
) -> gym.Env:
    _import_path(cwd)
    if worker:
        one_thread_per_worker()
    extra = {"max_episode_steps": max_episode_steps} if max_episode_steps else {}
    if suite == "atari":
        env = gym.wrappers.AtariPreprocessing(
            gym.make(env_id, frameskip=1, **kwargs, **extra), **ATARI
        )
    else:
        env = gym.make(env_id, **kwargs, **extra)
    if frame_stack > 1:
        env = gym.wrappers.FrameStackObservation(env, frame_stack)
    return env


def _shareable(space: gym.Space) -> bool:
    """Whether gymnasium can pass ``space`` through shared memory (not MiniGrid's mission text):
    where it cannot, the async workers send their observations by pipe."""
    try:
        gym.vector.utils.create_shared_memory(space, n=1)
    except Exception:  # gymnasium raises several kinds for a space it has no layout for
        return False
    return True


def _gymnasium_vector_env(cfg: EnvConfig, n: int, backend: str):
    """gymnasium's SyncVectorEnv or AsyncVectorEnv (SAME_STEP autoreset), the obs spec and the
    action mask's source (``env.action_mask``, looked up on the probe env)."""
    env_id = resolve_id(cfg)
    check_env_id(env_id)
    args = (env_id, dict(cfg.kwargs), cfg.max_episode_steps, os.getcwd())
    wrap = {"suite": cfg.suite, "frame_stack": cfg.frame_stack}
    try:
        probe = _make_one(*args, **wrap)
    except Exception as e:  # a bad kwarg or a broken user env: say which
        raise ConfigError(
            f"env.id={env_id!r} with env.kwargs={dict(cfg.kwargs)} failed to "
            f"build: {type(e).__name__}: {e}"
        ) from None
    try:
        space = probe.observation_space
        source = masks.resolve(cfg.action_mask, space, probe.action_space, probe)
        obs_spec, _ = observation_spec(space, *_obs_args(cfg, source))
        shared = backend == "async" and _shareable(probe.observation_space)
    finally:
        probe.close()
    if backend == "async":
        fn = functools.partial(_make_one, *args, worker=True, **wrap)
        mode = AutoresetMode.SAME_STEP
        vec = AsyncVectorEnv([fn] * n, shared_memory=shared, autoreset_mode=mode)
        return vec, obs_spec, source
    fn = functools.partial(_make_one, *args, **wrap)
    return SyncVectorEnv([fn] * n, autoreset_mode=AutoresetMode.SAME_STEP), obs_spec, source


def _obs_args(cfg: EnvConfig, source=None) -> tuple:
    """``observation_spec``'s arguments after the space: obs_keep, obs_keys, symbolic, and the
    entries left out (an action mask's, see :mod:`rltool.envs.masks`)."""
    keys = list(cfg.obs_keys) if cfg.obs_keys is not None else None
    exclude = source.excluded(keys) if source is not None else ()
    return cfg.obs_keep, keys, cfg.image == "symbolic", exclude


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
    n = num_envs or cfg.num_envs
    backend = backend or cfg.backend
    env_id = resolve_id(cfg)
    if backend == "envpool":
        vec = EnvPoolVectorEnv(env_id, n, dict(cfg.kwargs), cfg.max_episode_steps)
        space = vec.single_observation_space  # no probe env: auto finds a Dict entry only
        source = masks.resolve(cfg.action_mask, space, vec.single_action_space)
        if source is not None and source.kind == "method":
            raise ConfigError(
                f"env.action_mask={cfg.action_mask}: envpool envs have no Python methods to "
                "call; use env.backend=sync or async, or an info:<key> / obs:<entry> mask"
            )
        obs_spec, _ = observation_spec(space, *_obs_args(cfg, source))
    else:
        vec, obs_spec, source = _gymnasium_vector_env(cfg, n, backend)
    if cfg.normalize_obs and obs_norm is None:
        obs_norm = make_obs_normalizer(obs_spec, cfg.clip_obs, cfg.normalize_obs_frames)
    scaler = RewardScaler(n, gamma) if cfg.normalize_reward and training else None
    norm = obs_norm if cfg.normalize_obs else None
    keys, symbolic = _obs_args(cfg)[1:3]
    label = env_id if env_id.endswith(cfg.id) else f"{cfg.id} ({env_id})"  # the user's name
    env = VectorEnv(
        vec,
        cfg.obs_keep,
        norm,
        scaler,
        device,
        obs_keys=keys,
        symbolic=symbolic,
        env_id=label,
        check=cfg.check,
        step_timeout_s=cfg.step_timeout_s,
        action_mask=source,
    )
    env.set_training(training)
    env.time_limit = cfg.max_episode_steps or _registered_limit(env_id)
    return env


def _registered_limit(env_id: str) -> int | None:
    """The registered ``max_episode_steps`` of ``env_id`` (its TimeLimit), or None."""
    try:
        return gym.spec(env_id.split(":", 1)[-1]).max_episode_steps
    except gym.error.Error:
        return None
