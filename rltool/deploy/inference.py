"""A trained policy outside training: ``policy, state = rltool.load_policy(run_dir)``.

The policy comes back in eval + exploit mode with the run's frozen observation normalisation; it
takes raw env observations and returns env-ready actions, carrying its recurrent state:

    policy, state = rltool.load_policy("outputs/2026-12-02/10-11-12")
    obs, _ = env.reset(seed=0)
    while True:
        action, state = policy(obs, state)
        obs, reward, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break   # a new episode starts from policy.initial_state()

A policy trained with action masks (``env.action_mask``) acts on valid actions only: it reads the
mask as training did, from the raw observation's entry (``obs:<entry>``); from ``info=`` (the info
of the reset / step, ``info:<key>``); or from ``env=`` (``method:<name>``, called on it); or
takes ``action_mask=`` ([n] or [B, n], bool or 0 / 1) whatever the source.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from rltool import algos, memories
from rltool import keys as K
from rltool.config import EnvConfig, PolicyConfig
from rltool.config.saved import read_saved
from rltool.envs import make_env
from rltool.envs.normalize import EntryNormalizer, ObsNormalizer, make_obs_normalizer
from rltool.envs.record import EnvRecord
from rltool.envs.vector import VectorEnv
from rltool.errors import UserError
from rltool.modules import make_policy
from rltool.run import checkpoint as ckpt
from rltool.runfolder import layout


def _typed(schema, node: dict):
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


@dataclass
class Restored:
    """A checkpoint turned back into objects: the configs, the policy (exploit, eval), the
    frozen observation normaliser (or None) and the env's record (specs, converter, mask source,
    action map: ``rltool.envs.record.EnvRecord``)."""

    env_cfg: EnvConfig
    policy_cfg: PolicyConfig
    config: dict
    policy: torch.nn.Module
    obs_norm: ObsNormalizer | EntryNormalizer | None
    frames: int
    checkpoint: str  # the file's name
    record: EnvRecord

    def make_env(self, num_envs: int, **kwargs) -> VectorEnv:
        """An eval env: frozen shared normalisation, no reward scaling, sync backend."""
        return make_env(
            kwargs.pop("env_cfg", self.env_cfg),
            num_envs=num_envs,
            obs_norm=self.obs_norm,
            training=False,
            backend="sync",
            **kwargs,
        )


def checkpoint_path(run_dir, checkpoint: str | None = None) -> Path:
    """The latest checkpoint of ``run_dir``, or the one named by ``checkpoint``: ``best`` (the
    policy of the best evaluation), a file name of ``<run>/checkpoints`` (with or without .pt) or
    its frame count."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run={run_dir}: no such folder; give a run folder (outputs/<date>/<time>)")
    folder = ckpt.checkpoint_dir(run_dir)
    if checkpoint is None:
        path = ckpt.latest(folder)
        if path is None:
            raise UserError(
                f"run={run_dir} holds no checkpoint (nothing in {folder}): give the folder of a "
                "training run that wrote one"
            )
        return path
    name = layout.checkpoint_name(int(checkpoint)) if checkpoint.isdigit() else checkpoint
    path = folder / (name if name.endswith(".pt") else f"{name}.pt")
    if not path.is_file():
        have = folder.glob(layout.CHECKPOINT_GLOB) if folder.is_dir() else []
        have = sorted(p.stem for p in have)
        why = " (written by runs with checkpoint.save_best=true)" if name == layout.BEST else ""
        raise UserError(
            f"checkpoint {checkpoint!r} not found in {folder}{why}: choose one of "
            f"{', '.join(have) or 'none'} (or its frame count)"
        )
    return path


def restore(run_dir, checkpoint: str | None = None) -> Restored:
    """Rebuilds the policy of the run in ``run_dir`` from its (latest or named) checkpoint,
    loaded with ``weights_only=True`` (``rltool.run.checkpoint.load``). The run's own
    ``config.yaml`` is trusted, not the file: a checkpoint written with another env, policy or
    algorithm (a file copied in from another run) is refused, as a resume refuses it. No env is
    built where the checkpoint holds the env's record (``env``, written by every checkpoint now);
    an older checkpoint's record is learnt from a throwaway env, as before."""
    path = checkpoint_path(run_dir, checkpoint)
    body = ckpt.load(path)
    config, state = memories.migrate(body["config"]), body["state"]  # older runs' layout too
    _check_run(Path(run_dir), config, path)
    env_cfg, policy_cfg = _typed(EnvConfig, config["env"]), _typed(PolicyConfig, config["policy"])
    record = env_record(body, env_cfg)
    specs, obs_norm = record.specs, None
    if env_cfg.normalize_obs:  # a fresh normaliser of the run's layout, as make_env builds it
        obs_norm = make_obs_normalizer(
            specs.observation, env_cfg.clip_obs, env_cfg.normalize_obs_frames
        )
    if state.get("obs_norm") is not None and obs_norm is not None:
        obs_norm.load_state_dict(state["obs_norm"])
    policy = make_policy(policy_cfg, specs, heads=algos.get(config["loss"]["name"]).heads)
    try:
        policy.load_state_dict(state["policy"])
    except RuntimeError as e:
        raise UserError(
            f"the checkpoint of {run_dir} does not fit the policy its config describes "
            f"({str(e).splitlines()[0]})"
        ) from None
    policy.eval()
    policy.explore = False
    frames = int(body["counters"]["frames"])
    return Restored(env_cfg, policy_cfg, config, policy, obs_norm, frames, path.name, record)


def env_record(body: dict, env_cfg: EnvConfig) -> EnvRecord:
    """The env's record of a loaded checkpoint ``body``: its ``env`` entry, or, in a checkpoint
    written before records (or of a space without a plain form), a throwaway env's."""
    if body.get("env") is not None:
        return EnvRecord.from_plain(body["env"])
    probe = make_env(env_cfg, num_envs=1, training=False, backend="sync")
    probe.close()
    return probe.record


def _check_run(run_dir: Path, config: dict, path: Path) -> None:
    """Refuses checkpoint ``path`` when its ``config`` differs from the run's ``config.yaml``
    in a key a resume may not change (``rltool.run.checkpoint.check_config``)."""
    own = layout.RunFolder(run_dir).config
    if not own.is_file():  # a folder of checkpoints only: nothing to check against
        return
    fix = f"put back the checkpoint {run_dir} wrote, or evaluate the run that wrote this one"
    ckpt.check_config(config, read_saved(own), path, fix)


class LoadedPolicy:
    """Raw observation(s) -> env-ready action(s), with the recurrent state passed in and out.

    What ``rltool.load_policy`` returns. Call it as ``action, state = policy(obs, state)``.

    Attributes:
        module (torch.nn.Module): The torch policy (eval, exploit mode).

    Example:
        ```python
        state = policy.initial_state()  # at every env.reset
        action, state = policy(obs, state)
        ```
    """

    def __init__(self, restored: Restored):
        self.restored, self.module = restored, restored.policy
        record = restored.record
        self.specs, self.convert, self.mask_source = record.specs, record.converter, record.mask
        self.action_map = record.action_map()

    def initial_state(self, batch_size: int = 1) -> dict[str, torch.Tensor]:
        """Zeros for the recurrent state (and the previous action / reward inputs).

        Args:
            batch_size (int): The number of envs ``B`` the state is for.

        Returns:
            dict[str, torch.Tensor]: The state keys' zeros, each ``[B, ...]``.
        """
        return {
            k: s.zeros(batch_size)
            for k, s in {**self.module.state_specs, **self.module.input_specs}.items()
        }

    @torch.no_grad()
    def __call__(
        self, observation, state: dict, reward=None, *, action_mask=None, info=None, env=None
    ):
        """One step: the greedy action for ``observation`` and the state after it.

        Args:
            observation: One raw env observation, or a batch ``[B, ...]`` (a dict / tuple for a
                Dict / Tuple space, as the env gives it).
            state (dict[str, torch.Tensor]): The state before the step, from
                ``initial_state(B)`` or the last call.
            reward (float | array | None): The reward that came with this observation; read
                only by policies with ``prev_reward`` inputs (None at an episode's start).
            action_mask (array | None): ``[n]`` or ``[B, n]`` valid actions (bool or 0 / 1),
                overriding the mask source training used.
            info (dict | None): The reset / step info, where the mask is ``info:<key>``.
            env (gymnasium.Env | None): The env, where the mask is ``method:<name>``.

        Returns:
            tuple: ``(action, state)``: the env action (one, or ``[B, ...]`` for a batch) as
                numpy, and the state after the step.

        Raises:
            rltool.errors.UserError: A state for another batch size, an observation of the
                wrong shape, or a mask that does not fit.
        """
        one = self.convert.batch_one(observation)  # None when already a batch
        single = one is not None
        raw = one if single else observation
        batch = self.convert.batch_size(raw)
        for k, v in state.items():
            if v.shape[0] != batch:
                raise UserError(
                    f"state[{k!r}] is for {v.shape[0]} env(s) but {batch} observation(s) came: "
                    f"start from policy.initial_state({batch})"
                )
        obs = self.convert(raw)  # the env layer's conversion; frozen normalisation
        if self.restored.obs_norm is not None:
            obs = self.restored.obs_norm(obs, False)
        inputs = {K.OBSERVATION: obs}
        for k in self.module.input_specs:
            inputs[k] = state[k]
        if reward is not None and K.PREV_REWARD in inputs:
            inputs[K.PREV_REWARD] = torch.as_tensor(reward, dtype=torch.float32).reshape(-1, 1)
        if self.module.mask_key is not None:
            inputs[K.ACTION_MASK] = self._mask(observation, action_mask, info, env, obs.shape[0])
        rnn_state = {k: state[k] for k in self.module.state_specs}
        is_init = torch.zeros(obs.shape[0], 1, dtype=torch.bool)
        out, nxt = self.module.step(inputs, rnn_state, is_init)
        action = out[K.ACTION]
        new_state = dict(nxt)
        if K.PREV_ACTION in self.module.input_specs:
            new_state[K.PREV_ACTION] = action
        if K.PREV_REWARD in self.module.input_specs:
            new_state[K.PREV_REWARD] = inputs[K.PREV_REWARD]
        env_action = self.action_map(action).cpu().numpy()
        return env_action[0] if single else env_action, new_state

    def _mask(self, observation, action_mask, info, env, batch: int) -> torch.Tensor:
        """The mask [B, n] bool, given or read from the source training used."""
        source, n = self.mask_source, self.specs.action_mask.shape[0]
        m = action_mask if action_mask is not None else source.read_one(observation, info, env)
        m = np.asarray(m)
        if m.size != batch * n or m.dtype.kind not in "biu":
            raise UserError(
                f"action mask of shape {list(m.shape)} and dtype {m.dtype} does not fit this "
                f"policy: give [{n}] (or [B, {n}]) bools, one per action"
            )
        return torch.from_numpy(m.reshape(batch, n).astype(bool))


def load_policy(run_dir, checkpoint: str | None = None) -> tuple[LoadedPolicy, dict]:
    """The run's trained policy, for your own loop, and its initial state for one env.

    The policy is in exploit (greedy) mode with the run's frozen observation normalisation: raw
    observation in, env action out.

    Args:
        run_dir (str | Path): The run folder.
        checkpoint (str | None): The latest when None; ``"best"`` (the best evaluation's), a
            file name or a frame count.

    Returns:
        tuple[LoadedPolicy, dict]: The policy and its initial state (``policy.initial_state(1)``).

    Raises:
        rltool.errors.UserError: No run folder or checkpoint there, or a checkpoint that holds
            pickled objects (checkpoints load with ``weights_only=True``).

    Example:
        ```python
        policy, state = rltool.load_policy("runs/lstm", checkpoint="best")
        action, state = policy(obs, state)
        ```
    """
    policy = LoadedPolicy(restore(Path(run_dir), checkpoint))
    return policy, policy.initial_state(1)
