"""A gymnasium vector env seen as a TensorDict env with batch size [num_envs].

Gymnasium runs in SAME_STEP autoreset mode: a step that ends an episode returns the reset
observation at once and the final one in ``info["final_obs"]``. We split them:
``("next", "observation")`` is the true final observation (what bootstrapping on truncation
needs) and the root observation of the following step is the reset one, flagged ``is_init``.
No transition crosses an episode boundary.
"""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rltool import keys as K
from rltool.envs.faults import EnvGuard
from rltool.envs.masks import MaskSource
from rltool.envs.normalize import ObsNormalizer, RewardScaler
from rltool.envs.record import EnvRecord
from rltool.envs.spaces import make_converter
from rltool.envs.state import get_env_state, set_env_state


class StepResult(NamedTuple):
    """One vector step, every tensor with leading dim [B]."""

    observation: torch.Tensor  # root observation of the next step: the reset one where done
    next_observation: torch.Tensor  # the observation the step led to: the final one where done
    reward: torch.Tensor  # [B, 1] (scaled when reward scaling is on)
    terminated: torch.Tensor  # [B, 1] bool
    truncated: torch.Tensor  # [B, 1] bool
    done: torch.Tensor  # [B, 1] bool
    episode_return: torch.Tensor  # [B, 1] raw return of the episode that ended (valid where done)
    episode_length: torch.Tensor  # [B, 1] int64 (valid where done)


def observation_spec(
    space: gym.Space,
    keep: list[int] | None,
    obs_keys: list[str] | None = None,
    symbolic: bool = False,
    exclude: tuple = (),
):
    """The observation spec of ``space`` and its converter (batched numpy -> a tensor [B, *shape],
    or a TensorDict [B] for a Dict / Tuple space; see :mod:`rltool.envs.spaces`)."""
    conv = make_converter(space, keep, obs_keys, symbolic, exclude)
    return conv.spec, conv


class VectorEnv:
    """TensorDict env over a gymnasium vector env (which must use SAME_STEP autoreset). What
    goes wrong inside the env is an :class:`~rltool.errors.EnvError` naming ``env_id``; ``check``
    is ``env.check``, ``step_timeout_s`` ``env.step_timeout_s`` (see :mod:`rltool.envs.faults`).
    ``action_mask``: where the env's action masks come from (:mod:`rltool.envs.masks`), or None:
    ``action_mask`` / ``next_action_mask`` hold the root's and the step's next masks [B, n]
    bool."""

    def __init__(
        self,
        vec_env: gym.vector.VectorEnv,
        obs_keep: list[int] | None = None,
        obs_norm: ObsNormalizer | None = None,
        reward_scaler: RewardScaler | None = None,
        device: torch.device | str = "cpu",
        obs_keys: list[str] | None = None,
        symbolic: bool = False,
        env_id: str | None = None,
        check: str = "auto",
        action_mask: MaskSource | None = None,
        step_timeout_s: float | None = None,
    ):
        self.vec_env, self.num_envs = vec_env, vec_env.num_envs
        space = vec_env.single_observation_space
        self._masks = action_mask
        # what a policy needs of this env (specs, converter, mask source), saved in checkpoints
        self.record = EnvRecord(
            space, vec_env.single_action_space, obs_keep, obs_keys, symbolic, action_mask
        )
        self._convert, self.specs = self.record.converter, self.record.specs
        obs = self.specs.observation
        self.action_mask = self.next_action_mask = None
        env_id = env_id or getattr(getattr(vec_env, "spec", None), "id", None) or "?"
        self.guard = EnvGuard(vec_env, env_id, check, obs, step_timeout_s)
        self.time_limit: int | None = None  # the env's own episode cap, where known (factory)
        self.obs_norm, self.reward_scaler = obs_norm, reward_scaler
        self.device = torch.device(device)
        self.training = True
        self.action_map = self.record.action_map()  # policy action -> env action
        # [B, 1] like the tensors they become: no reshape per step
        self._ep_return = np.zeros((self.num_envs, 1))
        self._ep_length = np.zeros((self.num_envs, 1), dtype=np.int64)

    @property
    def batch_size(self) -> torch.Size:
        return torch.Size([self.num_envs])

    def to(self, device: torch.device | str) -> VectorEnv:
        """Returns the env's tensors on ``device`` from now on (the simulation stays on the CPU)."""
        self.device = torch.device(device)
        return self

    def set_training(self, training: bool) -> None:
        """Training updates the normalisation statistics; eval freezes them."""
        self.training = training

    def _obs(self, raw, update: bool = True) -> torch.Tensor:
        return self._norm(self._convert(raw), update)

    def _norm(self, obs, update: bool):
        return self.obs_norm(obs, update and self.training) if self.obs_norm is not None else obs

    def _to(self, *tensors: torch.Tensor):
        if self.device.type == "cpu":
            return tensors
        return tuple(t.to(self.device, non_blocking=True) for t in tensors)

    # ---- tensor-level API (the collector's hot path) ----
    def reset_tensors(self, seed: int | None = None) -> torch.Tensor:
        g = self.guard
        raw, info = g.call("reset", self.vec_env.reset, seed=seed)
        if g.check != "never":
            g.in_space(raw)
        if self._masks is not None:
            self.action_mask = self._root_mask(raw, info)
        obs = g.converted(self._convert, raw)
        g.finite(obs, None)
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        if self.reward_scaler is not None:
            self.reward_scaler.reset_returns()
        return self._to(self._norm(obs, True))[0]

    def step_tensors(self, action: torch.Tensor) -> StepResult:
        act = action.detach()
        act = self.action_map(act if act.device.type == "cpu" else act.cpu()).numpy()
        g = self.guard
        g.steps += 1
        raw, reward, term, trunc, info = g.call("step", self.vec_env.step, act)
        done = term | trunc
        obs = g.converted(self._convert, raw)
        g.finite(obs, reward)
        if g.due():
            g.in_space(raw, info.get("final_obs"), info.get("_final_obs"))
        self._ep_return += reward[:, None]
        self._ep_length += 1
        ep_ret = torch.from_numpy(self._ep_return.astype(np.float32))
        ep_len = torch.from_numpy(self._ep_length.copy())
        obs = self._norm(obs, True)
        next_obs = obs
        if done.any():
            self._ep_return[done], self._ep_length[done] = 0.0, 0
            final = self._convert.merge_final(raw, info["final_obs"], info["_final_obs"])
            g.finite(final, None, "final observation")
            next_obs = self._norm(final, update=False)
        rew = torch.from_numpy(np.asarray(reward, dtype=np.float32)[:, None])
        if self.reward_scaler is not None:
            rew = self.reward_scaler(rew[:, 0], torch.from_numpy(done), self.training)[:, None]
        flags = [torch.from_numpy(x[:, None]) for x in (term, trunc, done)]
        if self._masks is not None:
            self._step_masks(raw, info, done)
        return StepResult(*self._to(obs, next_obs, rew, *flags, ep_ret, ep_len))

    def _root_mask(self, raw, info) -> torch.Tensor:
        """The masks [B, n] of the observations the policy acts on next (EnvError if one allows
        no action)."""
        m = self._masks.read(self.vec_env, raw, info, self.guard)
        self._masks.check_some(m, self.guard)
        return self._to(torch.from_numpy(m))[0]

    def _step_masks(self, raw, info, done: np.ndarray) -> None:
        root = self._masks.read(self.vec_env, raw, info, self.guard)
        nxt = self._masks.final(root, info, done) if done.any() else root
        self._masks.check_some(root, self.guard)
        self.action_mask, self.next_action_mask = self._to(
            torch.from_numpy(root), torch.from_numpy(nxt)
        )

    def reset_where(self, mask: np.ndarray) -> torch.Tensor | None:
        """New episodes in the envs where ``mask`` [B] bool (the others untouched); returns the
        observations [B, ...] (new where ``mask``), or None where the backend cannot reset one
        env alone (envpool)."""
        if not isinstance(self.vec_env, gym.vector.SyncVectorEnv | gym.vector.AsyncVectorEnv):
            return None
        options = {"reset_mask": np.asarray(mask, dtype=bool)}
        raw, info = self.guard.call("reset", self.vec_env.reset, options=options)
        if self._masks is not None:  # the reset envs' masks; the others' stay
            rows = np.asarray(mask, bool)
            m = self._masks.read(self.vec_env, raw, info, self.guard, rows)
            m[~rows] = self.action_mask.cpu().numpy()[~rows]
            self._masks.check_some(m, self.guard)
            self.action_mask = self._to(torch.from_numpy(m))[0]
        obs = self.guard.converted(self._convert, raw)
        self.guard.finite(obs, None)
        self._ep_return[mask], self._ep_length[mask] = 0.0, 0
        if self.reward_scaler is not None:  # the running returns of the episodes cut short
            self.reward_scaler.ret[mask] = 0.0
        return self._to(self._norm(obs, False))[0]

    # ---- TensorDict API ----
    def reset(self, seed: int | None = None) -> TensorDict:
        """A [B] TensorDict with ``observation`` and ``is_init`` (all True)."""
        obs = self.reset_tensors(seed)
        is_init = torch.ones(self.num_envs, 1, dtype=torch.bool, device=self.device)
        root = {K.OBSERVATION: obs, K.IS_INIT: is_init}
        if self.action_mask is not None:
            root[K.ACTION_MASK] = self.action_mask
        return TensorDict(root, self.batch_size, device=self.device)

    def step(self, td: TensorDict) -> TensorDict:
        """Reads ``action``; writes ``("next", ...)``: observation (final where done), reward,
        terminated, truncated, done, episode_return / episode_length. Keeps the whole step (with
        the reset observation) as ``last_step``."""
        r = self.last_step = self.step_tensors(td[K.ACTION])
        policy_next = td.get(K.NEXT, None)  # e.g. ("next", state) written by a recurrent policy
        td[K.NEXT] = TensorDict(
            {
                K.OBSERVATION: r.next_observation,
                K.REWARD: r.reward,
                K.TERMINATED: r.terminated,
                K.TRUNCATED: r.truncated,
                K.DONE: r.done,
                K.EPISODE_RETURN: r.episode_return,
                K.EPISODE_LENGTH: r.episode_length,
            },
            self.batch_size,
            device=self.device,
        )
        if self.next_action_mask is not None:
            td[K.NEXT, K.ACTION_MASK] = self.next_action_mask
        if policy_next is not None:
            td[K.NEXT].update(policy_next)
        return td

    def step_and_maybe_reset(self, td: TensorDict) -> tuple[TensorDict, TensorDict]:
        """``step`` plus the root TensorDict of the next step (reset observation and ``is_init``
        where the episode ended)."""
        td = self.step(td)
        root = {K.OBSERVATION: self.last_step.observation, K.IS_INIT: td[K.NEXT, K.DONE].clone()}
        if self.action_mask is not None:
            root[K.ACTION_MASK] = self.action_mask
        return td, TensorDict(root, self.batch_size, device=self.device)

    # ---- episodes in progress (exact resume; see envs/state.py) ----
    def get_state(self) -> dict | None:
        """Every sub-env's state, the episode counters and the reward scaler's running return, as
        tensors and plain containers; None where a sub-env lacks the protocol or runs async."""
        envs = getattr(self.vec_env, "envs", None)  # only the sync backend holds them here
        states = [get_env_state(e) for e in envs] if envs is not None else [None]
        if any(s is None for s in states):
            return None
        scaler = self.reward_scaler
        return {
            "envs": states,
            "episode_return": torch.from_numpy(self._ep_return.copy()),
            "episode_length": torch.from_numpy(self._ep_length.copy()),
            "reward_return": scaler.returns() if scaler is not None else None,
        }

    def set_state(self, state: dict) -> None:
        for env, s in zip(self.vec_env.envs, state["envs"], strict=True):
            set_env_state(env, s)
        # [B] in checkpoints written before the counters became [B, 1]
        self._ep_return[:] = state["episode_return"].numpy().reshape(self._ep_return.shape)
        self._ep_length[:] = state["episode_length"].numpy().reshape(self._ep_length.shape)
        if self.reward_scaler is not None:
            self.reward_scaler.set_returns(state["reward_return"])

    def close(self) -> None:
        self.guard.close()
