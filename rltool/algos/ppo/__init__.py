"""PPO (clipped surrogate, GAE): the loss in ``rltool/losses/ppo.py``, the update in
``algorithm.py``, the config in ``config.py``."""

from rltool.algos import AlgoSpec, register
from rltool.algos.ppo.config import PPOConfig, check_config, rollout_multiple

SPEC = register(
    AlgoSpec(
        name="ppo",
        config=PPOConfig,
        heads=("actor", "critic"),
        algorithm="rltool.algos.ppo.algorithm:PPO",
        check=check_config,
        rollout_multiple=rollout_multiple,
        data_parallel=True,  # the same epochs of steps on every rank's own rollout
    )
)
