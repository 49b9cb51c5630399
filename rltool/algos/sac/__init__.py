"""SAC (squashed Gaussian actor, twin Q(s, a) critics with Polyak targets, automatic entropy
tuning), recurrent on the replay's sequences: the loss in ``rltool/losses/sac.py``, the replay in
``rltool/data/buffer.py`` (DQN's), the update in ``algorithm.py``, the config in ``config.py``."""

from rltool.algos import AlgoSpec, register
from rltool.algos.sac.config import SACConfig, check_config

SPEC = register(
    AlgoSpec(
        name="sac",
        config=SACConfig,
        heads=("actor", "qvalue"),
        algorithm="rltool.algos.sac.algorithm:SAC",
        check=check_config,
    )
)
