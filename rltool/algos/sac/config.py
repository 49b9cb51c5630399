"""SAC's config: the ``loss`` group's schema for ``loss=sac`` (``conf/loss/sac.yaml``), and the
checks SAC makes of the other groups (continuous actions, replay, separate memories)."""

from __future__ import annotations

from dataclasses import dataclass

from rltool.algos.dqn.config import check_config as check_replay
from rltool.config.fields import check, check_fields, loss_reduction, ranged


@dataclass
class SACConfig:
    """After pomdp-baselines' recurrent SAC (Ni et al. 2022): the rest of a combination's needs
    (budget, batch, memory width, the optimizer) are in ``conf/tuned/<env>_<policy>_sac.yaml``."""

    name: str = "sac"  # the algorithm (set by loss=sac)
    gamma: float = ranged(0.99, ge=0, le=1)  # the discount (pomdp-baselines' Pendulum: 0.9)
    # 1-step targets only: an n-step SAC target would skip the entropy bonus of the steps between
    n_steps: int = ranged(1, ge=1, le=1)
    reduction: str = loss_reduction()  # mean | sum over the batch, of each sub-loss
    tau: float = ranged(0.005, gt=0, le=1)  # target critics <- tau * online + (1 - tau) * target
    alpha_init: float = ranged(1.0, gt=0)  # the entropy coefficient at the start (tuned after)
    # the entropy alpha is tuned towards; null: -|A| (minus the action's size)
    target_entropy: float | None = None
    # gradient updates per collected batch (collector.frames_per_batch frames; equal to it: one
    # update per env step); each samples buffer.batch_size sequences (recurrent) or transitions
    utd_ratio: int = ranged(200, ge=1)
    warmup_frames: int = ranged(1000, ge=0)  # env frames collected before the first update

    def __post_init__(self):
        check_fields(self, "loss")


def check_config(cfg) -> None:
    """DQN's replay checks (no running normalisation, a buffer holding a batch), and separate
    memories: the critics' torso is their own (``policy.shared_torso`` is PPO's option)."""
    check_replay(cfg)
    check(
        not cfg.policy.shared_torso,
        "policy.shared_torso",
        True,
        "loss=sac trains separate actor and critic memories (as pomdp-baselines); "
        "set policy.shared_torso=false",
    )
