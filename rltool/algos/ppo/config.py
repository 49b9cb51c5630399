"""PPO's config: the ``loss`` group's schema for ``loss=ppo`` (``conf/loss/ppo.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from rltool.config import check, check_choice


@dataclass
class PPOConfig:
    name: str = "ppo"
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_epsilon: float = 0.2
    anneal_clip: bool = False  # clip epsilon decays linearly to 0 over total_frames
    clip_value: float | None = None  # value clipping range; null = off
    normalize_advantage: bool = True
    entropy_coef: float = 0.0
    anneal_entropy: bool = False  # entropy_coef decays linearly to 0 over total_frames
    value_coef: float = 0.5
    reduction: str = "mean"
    epochs: int = 10
    num_minibatches: int = 4
    target_kl: float | None = None  # stop a batch's epochs once approx_kl > 1.5x this; null = off
    sampler: str = "auto"  # auto | steps | sequences

    def __post_init__(self):
        check(0 <= self.gamma <= 1, "loss.gamma", self.gamma, "must be in [0, 1]")
        check(0 <= self.gae_lambda <= 1, "loss.gae_lambda", self.gae_lambda, "must be in [0, 1]")
        check(self.clip_epsilon > 0, "loss.clip_epsilon", self.clip_epsilon, "must be > 0")
        if self.clip_value is not None:
            check(self.clip_value > 0, "loss.clip_value", self.clip_value, "must be > 0 or null")
        check(self.entropy_coef >= 0, "loss.entropy_coef", self.entropy_coef, "must be >= 0")
        check(self.value_coef >= 0, "loss.value_coef", self.value_coef, "must be >= 0")
        check_choice("loss.reduction", self.reduction, ("mean", "sum", "none"))
        check(self.epochs >= 1, "loss.epochs", self.epochs, "must be >= 1")
        check(
            self.num_minibatches >= 1, "loss.num_minibatches", self.num_minibatches, "must be >= 1"
        )
        if self.target_kl is not None:
            check(self.target_kl > 0, "loss.target_kl", self.target_kl, "must be > 0 or null")
        check_choice("loss.sampler", self.sampler, ("auto", "steps", "sequences"))
