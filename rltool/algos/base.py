"""The interface an algorithm implements (see :mod:`rltool.algos`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tensordict import TensorDictBase

# step(terms): one gradient step on the sum of the ``loss_*`` terms (train.gradient_step), and
# the terms' scalars logged; step(terms, apply=False) logs them without a step
Step = Callable[..., None]


class Algorithm:
    """Built once per run, after the policy and before the collector and the optimizer, with the
    config, the training env (its specs, ``num_envs``), the policy and the run folder (None in
    tests without one). Must not draw random numbers in ``__init__`` unless it always does: the
    order of draws is part of a seeded run."""

    def __init__(self, cfg, env, policy, run_dir: Path | None = None):
        self.cfg, self.env, self.policy, self.run_dir = cfg, env, policy, run_dir

    def update(
        self, batch: TensorDictBase, progress: float, frames: int, step: Step
    ) -> dict[str, float]:
        """Learns from a fresh rollout ``batch`` [T, B] (on the loss device) at ``progress`` in
        [0, 1] of the schedule with ``frames`` collected so far, calling ``step`` for each
        gradient step; returns what it logs besides the loss terms (schedules, counts)."""
        raise NotImplementedError

    def state_parts(self) -> tuple[dict, dict]:
        """What a checkpoint holds besides the shared parts: (stateful objects by name, folder
        savers by name); see :mod:`rltool.run.checkpoint` for the two protocols."""
        return {}, {}

    def close(self) -> None:
        """Frees what the algorithm holds (scratch files) at the end of the run."""
