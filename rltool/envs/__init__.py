"""Gymnasium vector envs seen as TensorDict envs with batch size [num_envs]."""

from rltool.envs.factory import make_env
from rltool.envs.vector import StepResult, VectorEnv

__all__ = ["StepResult", "VectorEnv", "make_env"]
