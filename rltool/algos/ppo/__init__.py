"""PPO (clipped surrogate, GAE): the loss in ``rltool/losses/ppo.py``, the update in
``algorithm.py``, the config in ``config.py``."""

from rltool.algos import AlgoSpec, register
from rltool.algos.ppo.config import PPOConfig

SPEC = register(
    AlgoSpec(
        name="ppo",
        config=PPOConfig,
        heads=("actor", "critic"),
        algorithm="rltool.algos.ppo.algorithm:PPO",
        data_parallel=True,  # the same epochs of steps on every rank's own rollout
    )
)
