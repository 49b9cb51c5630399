"""The ``env`` group's schema (``conf/env/*.yaml``) and the list of env suites."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rltool.config.fields import check, check_fields, choice, ranged

# env.suite -> (the package that registers its envs, how a short env.id becomes a full one); gym:
# env.id as given. The one list of suites (rltool/envs/factory.py resolves ids with it).
ENV_SUITES: dict[str, tuple[str, str] | None] = {
    "gym": None,
    "popgym": ("popgym", "popgym-{}-v0"),
    "minigrid": ("minigrid", "MiniGrid-{}-v0"),
    "atari": ("ale_py", "ALE/{}-v5"),
}


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"  # a gymnasium id, module:Id for a user's env, or a suite's short name
    # how a short env.id is read: gym (as given) | popgym (RepeatPreviousEasy ->
    # popgym:popgym-RepeatPreviousEasy-v0) | minigrid (MemoryS7 -> minigrid:MiniGrid-MemoryS7-v0)
    # | atari (Pong -> ale_py:ALE/Pong-v5, with gymnasium's AtariPreprocessing)
    suite: str = choice("gym", tuple(ENV_SUITES))
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments of gym.make
    num_envs: int = ranged(8, ge=1)  # envs stepped together (the B of [T, B])
    # sync | async (gymnasium's) | envpool (pip install 'rltool[envpool]')
    backend: str = choice("sync", ("sync", "async", "envpool"))
    # indices of the flat observation that the agent sees; null = all (a POMDP mask otherwise)
    obs_keep: list[int] | None = None
    # entries of a Dict / Tuple observation that the agent sees (Tuple: "0", "1", ...; nested:
    # "outer.inner"); null = all but text
    obs_keys: list[str] | None = None
    # what image entries hold: pixels (intensities, scaled to [0, 1] in the policy) or symbolic
    # (codes such as MiniGrid's object / colour / state, embedded per channel); never guessed
    image: str = choice("pixels", ("pixels", "symbolic"))
    # a time limit (truncation); null: the env's own
    max_episode_steps: int | None = ranged(None, ge=1, null=True)
    # the last this many observations stacked on a new first axis (1: none); env=atari: mlp only
    frame_stack: int = ranged(1, ge=1)
    normalize_obs: bool = False  # scale observations by running mean and variance
    # the running observation statistics learn from this many frames, then stay fixed (null:
    # always): later, the policy's own drift would move them and shift what it sees
    normalize_obs_frames: int | None = ranged(None, ge=1, null=True)
    normalize_reward: bool = False  # scale rewards by the running std of discounted returns
    clip_obs: float = ranged(10.0, gt=0)  # normalised observations are clipped to [-this, this]
    # each step's observations against the declared space (shape, bounds, Discrete range):
    # auto = the first reset and 100 vector steps, always = every step, never; NaN / inf in an
    # observation or a reward is always caught (rltool/envs/faults.py)
    check: str = choice("auto", ("auto", "always", "never"))
    # seconds a reset / step of the vector env may take before the run stops with exit 4 naming
    # the env (a hang); null: no limit (a signal still ends a stuck env: docs/reference/exit-codes)
    step_timeout_s: float | None = ranged(None, gt=0, null=True)
    # valid actions each step: auto (an action_mask Dict entry, an action_masks() method or
    # info["action_mask"]; none found: every action valid) | obs:<entry> | info:<key> |
    # method:<name> | none (ignored)
    action_mask: str = "auto"

    def __post_init__(self):
        check(bool(self.id), "env.id", self.id, "give a gymnasium id, e.g. env.id=CartPole-v1")
        check_fields(self, "env")
        kind, _, name = self.action_mask.partition(":")
        check(
            self.action_mask in ("auto", "none") or (kind in ("obs", "info", "method") and name),
            "env.action_mask",
            self.action_mask,
            "choose auto, none, obs:<entry>, info:<key> or method:<name>",
        )
        check(
            self.backend != "envpool" or (self.suite != "atari" and self.frame_stack == 1),
            "env.backend",
            self.backend,
            "env=atari's preprocessing and env.frame_stack are gymnasium wrappers: use "
            "env.backend=sync or async",
        )
