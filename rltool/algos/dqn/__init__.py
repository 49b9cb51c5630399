"""DQN (double, n-step, recurrent with burn-in, prioritized replay): the loss in
``rltool/losses/dqn.py``, the replay in ``rltool/data/buffer.py``, the update and the target
network in ``algorithm.py``, the config in ``config.py``."""

from rltool.algos import AlgoSpec, register
from rltool.algos.dqn.config import DQNConfig, check_config

SPEC = register(
    AlgoSpec(
        name="dqn",
        config=DQNConfig,
        heads=("q",),
        algorithm="rltool.algos.dqn.algorithm:DQN",
        check=check_config,
    )
)
