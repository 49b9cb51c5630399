"""Losses (built from sub-losses, each with a ``reduction``) and returns."""

from rltool.losses.dqn import DQNLoss, linear_schedule, n_step_targets
from rltool.losses.ppo import PPOLoss
from rltool.losses.returns import add_gae, gae
from rltool.losses.sac import SACLoss

__all__ = ["DQNLoss", "PPOLoss", "SACLoss", "add_gae", "gae", "linear_schedule", "n_step_targets"]
