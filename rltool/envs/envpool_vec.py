"""``env.backend=envpool``: an EnvPool pool behind the gymnasium vector-env interface that
:class:`~rltool.envs.vector.VectorEnv` reads, in SAME_STEP autoreset mode.

EnvPool autoresets on the *next* step: the step after a done ignores its action and returns the
reset observation. Here, right after a step that ends episodes, the ended envs alone take that reset
step (EnvPool steps any subset of its envs), so the step returns the reset observation at once and
the final one in ``info["final_obs"]``, as gymnasium's SAME_STEP mode does. EnvPool seeds its envs
when the pool is made: ``reset(seed=s)`` with a new seed remakes the pool.
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np

from rltool.errors import ConfigError


@contextlib.contextmanager
def _quiet():
    """Silences gymnasium's warning that envpool's float64 Box bounds are cast to float32."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


class EnvPoolVectorEnv:
    """``num_envs`` EnvPool envs of ``env_id`` (``kwargs`` go to ``envpool.make``)."""

    def __init__(self, env_id: str, num_envs: int, kwargs: dict, max_episode_steps: int | None):
        try:
            import envpool
        except ImportError:
            raise ConfigError(
                "env.backend=envpool needs the envpool package: pip install 'rltool[envpool]' "
                "(Linux x86_64, Python >= 3.11), or use env.backend=sync"
            ) from None
        if env_id not in envpool.list_all_envs():
            raise ConfigError(
                f"env.backend=envpool has no env {env_id!r} (envpool.list_all_envs() lists "
                "them, e.g. CartPole-v1); use env.backend=sync for gymnasium envs"
            )
        self._id = env_id
        self._make = lambda seed: envpool.make(
            env_id,
            env_type="gymnasium",
            num_envs=num_envs,
            seed=seed,
            **({"max_episode_steps": max_episode_steps} if max_episode_steps else {}),
            **kwargs,
        )
        self.num_envs, self._seed = num_envs, 0
        self._pool = self._build(0)
        with _quiet():
            self.single_observation_space = self._pool.observation_space
            self.single_action_space = self._pool.action_space

    def _build(self, seed: int):
        try:
            with _quiet():
                pool = self._make(seed)
                pool.observation_space, pool.action_space  # noqa: B018 (built and cached here)
                return pool
        except (TypeError, ValueError, RuntimeError) as e:
            raise ConfigError(
                f"env.backend=envpool failed to build {self._id!r}: {e}; check env.kwargs"
            ) from None

    def reset(self, seed: int | None = None):
        if seed is not None and seed != self._seed:
            self._pool.close()
            self._pool, self._seed = self._build(seed), seed
        obs, info = self._pool.reset()
        return np.array(obs), info

    def step(self, actions: np.ndarray):
        obs, reward, term, trunc, info = self._pool.step(np.asarray(actions))
        order = np.argsort(info["env_id"])  # rows in env order whatever order the pool returns
        obs, reward, term, trunc = obs[order], reward[order], term[order], trunc[order]
        done = term | trunc
        info = {"_final_obs": done}
        if done.any():
            ids = np.flatnonzero(done).astype(np.int32)
            final = np.empty(self.num_envs, dtype=object)
            for i in ids:
                final[i] = obs[i]
            dummy = np.zeros((len(ids), *self.single_action_space.shape), dtype=actions.dtype)
            reset_obs, *_, reset_info = self._pool.step(dummy, env_id=ids)  # the reset step
            obs = obs.copy()
            obs[reset_info["env_id"]] = reset_obs
            info["final_obs"] = final
        return obs, reward, term, trunc, info

    def close(self) -> None:
        self._pool.close()
