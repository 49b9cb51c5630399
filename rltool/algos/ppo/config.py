"""PPO's config: the ``loss`` group's schema for ``loss=ppo``. Its defaults are the values
``rltool train`` runs (``conf/loss/ppo.yaml`` only selects the schema; tests/test_defaults.py
keeps the two equal)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rltool.config.fields import check, check_fields, choice, loss_reduction, ranged


@dataclass
class PPOConfig:
    """rl-zoo's tuned PPO for CartPole (with the collector's 8 envs x 32 steps and Adam's lr
    1e-3 annealed): 20 epochs of one minibatch, gamma 0.98, lambda 0.8, the clip annealed; it
    also fits the memory task (conf/tuned/cartpole_pomdp_*_ppo.yaml change what it needs)."""

    name: str = "ppo"  # the algorithm (set by loss=ppo)
    gamma: float = ranged(0.98, ge=0, le=1)  # discount
    gae_lambda: float = ranged(0.8, ge=0, le=1)  # GAE's lambda
    clip_epsilon: float = ranged(0.2, gt=0)  # the ratio's clip range [1 - this, 1 + this]
    anneal_clip: bool = True  # clip epsilon decays linearly to 0 over total_frames
    clip_value: float | None = ranged(None, gt=0, null=True)  # value clipping range; null = off
    normalize_advantage: bool = True  # per minibatch: zero mean, unit std
    entropy_coef: float = ranged(0.0, ge=0)  # weight of the entropy bonus
    # an entropy bonus decays with the clip and the lr (entropy_coef 0 by default: no bonus)
    anneal_entropy: bool = True
    value_coef: float = ranged(0.5, ge=0)  # weight of the value loss
    # how the loss terms reduce over the batch: mean | sum (the loss classes also take "none",
    # a library option for per-element terms; a training step needs a scalar)
    reduction: str = loss_reduction()
    epochs: int = ranged(20, ge=1)  # passes over each rollout
    num_minibatches: int = ranged(1, ge=1)  # per epoch; recurrent policies split the env columns
    # stop a batch's epochs once approx_kl > 1.5x this; null = off
    target_kl: float | None = ranged(None, gt=0, null=True)
    # how a rollout splits into minibatches: steps = shuffled single steps (stateless policies),
    # sequences = whole env columns (needed by a memory), auto = sequences for a memory, else steps
    sampler: str = choice("auto", ("auto", "steps", "sequences"))
    # before each epoch after the first, each env column's state at t=0 is recomputed with the
    # current parameters by re-running the memory over the previous rollout (recurrent policies;
    # docs/how-to/refresh-states.md)
    refresh_states: bool = False
    # how far back backpropagation through time reaches (recurrent policies;
    # docs/how-to/long-dependencies.md): null = the rollout's T steps; an integer H > T also
    # trains through each env's H - T steps before the rollout (kept across rollouts, run with
    # the current weights; the loss counts the rollout's steps); episode = back to each
    # episode's first step, at most loss.bptt_episode_cap steps in all
    bptt_horizon: Any = None
    bptt_episode_cap: int = ranged(1024, ge=1)  # bptt_horizon=episode: most steps in a sequence

    def __post_init__(self):
        check_fields(self, "loss")
        h = self.bptt_horizon
        check(
            h is None
            or h == "episode"
            or (isinstance(h, int) and not isinstance(h, bool) and h >= 1),
            "loss.bptt_horizon",
            h,
            "must be null (the rollout), a whole number of steps >= 1, or episode",
        )


def horizon(cfg) -> int | None:
    """The BPTT horizon in steps (``loss.bptt_horizon``; ``episode``: the cap), or None."""
    h = cfg.loss.bptt_horizon
    return cfg.loss.bptt_episode_cap if h == "episode" else h


def context_length(cfg) -> int:
    """Steps kept before each rollout: ``max(0, H - T)`` with T the rollout's steps per env."""
    h = horizon(cfg)
    return 0 if h is None else max(0, h - cfg.collector.frames_per_batch // cfg.env.num_envs)


def check_config(cfg) -> None:
    """PPO's minibatches against the rollout, before anything runs: a recurrent policy's
    minibatches are whole env columns (``sequences``), a stateless one's shuffled steps; either
    way they must split the rollout into ``num_minibatches`` equal parts."""
    loss, recurrent = cfg.loss, cfg.policy.kind != "mlp"
    check(
        not (recurrent and loss.sampler == "steps"),
        "loss.sampler",
        loss.sampler,
        "shuffled single steps cannot carry a recurrent state: use loss.sampler=sequences "
        f"(or auto) with policy.kind={cfg.policy.kind}",
    )
    check(
        recurrent or not loss.refresh_states,
        "loss.refresh_states",
        loss.refresh_states,
        "refreshes recurrent states, and policy.kind=mlp has none: drop it or use a memory "
        "(policy=lstm, gru, ...)",
    )
    _check_horizon(cfg, recurrent)
    n = loss.num_minibatches
    if recurrent or loss.sampler == "sequences":
        what, size = "env columns (env.num_envs)", cfg.env.num_envs
    else:
        what, size = (
            "frames of a rollout (collector.frames_per_batch)",
            cfg.collector.frames_per_batch,
        )
    check(
        size % n == 0,
        "loss.num_minibatches",
        n,
        f"must divide the {size} {what} into equal minibatches: choose a divisor of {size}",
    )


def _check_horizon(cfg, recurrent: bool) -> None:
    """A BPTT horizon needs a memory, and reaches past the rollout alone (no refresh, one
    process)."""
    h = cfg.loss.bptt_horizon
    if h is None:
        return
    check(
        recurrent,
        "loss.bptt_horizon",
        h,
        f"policy.kind={cfg.policy.kind} has no memory to train through time: drop it or use a "
        "memory (policy=lstm, gru, ...)",
    )
    if context_length(cfg) == 0:
        return
    check(
        not cfg.loss.refresh_states,
        "loss.refresh_states",
        True,
        f"refreshes the state at the rollout's start, and loss.bptt_horizon={h} trains from "
        "steps before it: choose one (drop loss.refresh_states or loss.bptt_horizon)",
    )
    check(
        cfg.distributed.nproc_per_node == 1,
        "loss.bptt_horizon",
        h,
        "reaches past the rollout, which data-parallel ranks do not support yet: drop it or "
        "run one process (distributed.nproc_per_node=1)",
    )


def rollout_multiple(cfg) -> int:
    """What a (cut) rollout's frame count must be a multiple of: the minibatch split."""
    return cfg.loss.num_minibatches
