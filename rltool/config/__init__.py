"""Typed configs: one dataclass per group, stored in Hydra's ConfigStore.

YAML options live in ``conf/<group>/<name>.yaml`` and start from these schemas, so a typo or a wrong
type fails at composition. A key's valid values are declared beside it (``ranged``, ``choice``:
``rltool/config/fields.py``, the one checker, and :func:`valid_values` for other code); rules
across keys are code in the schema's ``__post_init__``. Both run when
:func:`rltool.config.store.to_config` turns the composed DictConfig into these objects, before
anything is built (``rltool/config/store.py``: storing them, the conf/ folder, what a resume may
change). One file per group: ``env.py``, ``policy.py``, ``collector.py`` (and the replay
buffer), ``optim.py``, ``logger.py``, ``distributed.py``, ``run.py`` (:class:`Config`, eval,
checkpoint).
"""

from rltool.config.collector import BufferConfig, CollectorConfig
from rltool.config.distributed import DistributedConfig
from rltool.config.env import ENV_SUITES, EnvConfig
from rltool.config.fields import (
    Valid,
    check,
    check_choice,
    check_fields,
    check_reduction,
    choice,
    loss_reduction,
    ranged,
    valid_values,
)
from rltool.config.logger import (
    CSVLoggerConfig,
    LoggerConfig,
    TensorBoardLoggerConfig,
    WandbLoggerConfig,
)
from rltool.config.optim import OptimConfig
from rltool.config.policy import PolicyConfig
from rltool.config.run import (
    EVAL_EVERY,
    SEED_LIMIT,
    SMALL_BUDGET,
    CheckpointConfig,
    Config,
    EvalConfig,
    default_eval_every,
)

__all__ = [
    "ENV_SUITES",
    "EVAL_EVERY",
    "SEED_LIMIT",
    "SMALL_BUDGET",
    "BufferConfig",
    "CSVLoggerConfig",
    "CheckpointConfig",
    "CollectorConfig",
    "Config",
    "DistributedConfig",
    "EnvConfig",
    "EvalConfig",
    "LoggerConfig",
    "OptimConfig",
    "PolicyConfig",
    "TensorBoardLoggerConfig",
    "Valid",
    "WandbLoggerConfig",
    "check",
    "check_choice",
    "check_fields",
    "check_reduction",
    "choice",
    "default_eval_every",
    "ranged",
    "loss_reduction",
    "valid_values",
]
