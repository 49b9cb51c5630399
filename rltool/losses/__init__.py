"""Losses (built from sub-losses, each with a ``reduction``) and returns."""

from rltool.losses.ppo import PPOLoss
from rltool.losses.returns import add_gae, gae

__all__ = ["PPOLoss", "add_gae", "gae"]
