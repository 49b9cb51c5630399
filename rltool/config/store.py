"""The typed configs in Hydra's ConfigStore, the packaged ``conf/`` folder, the options a user
may choose, and the composed config turned into :class:`rltool.config.Config` (a saved run's
config read back, and what a resume may change: :mod:`rltool.config.saved`)."""

from __future__ import annotations

import dataclasses

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from rltool import algos
from rltool.config import (
    BufferConfig,
    CollectorConfig,
    Config,
    DistributedConfig,
    EnvConfig,
    LoggerConfig,
    OptimConfig,
    PolicyConfig,
)
from rltool.errors import ConfigError

SCHEMAS = {  # the loss group's schemas are the algorithms' (rltool.algos)
    "env": EnvConfig,
    "policy": PolicyConfig,
    "collector": CollectorConfig,
    "buffer": BufferConfig,
    "optim": OptimConfig,
    "logger": LoggerConfig,
    "distributed": DistributedConfig,
}


def register_configs() -> None:
    """Store the schemas: ``base_<group>`` for each group, ``base_<name>`` for each algorithm's
    loss config."""
    cs = ConfigStore.instance()
    OmegaConf.register_new_resolver("rltool_groups", _groups_help, replace=True)
    cs.store(name="base_config", node=Config)
    for group, schema in SCHEMAS.items():
        cs.store(group=group, name=f"base_{group}", node=schema)
    for algo in algos.specs():
        cs.store(group="loss", name=f"base_{algo.name}", node=algo.config)


SCHEMA_PREFIX = "base_"  # the stored schemas' option names: internal, never offered


def options(group: str) -> list[str]:
    """The options a user may choose for ``group`` (``conf/<group>/*.yaml`` and stored nodes),
    without the schemas."""
    from pathlib import Path

    names = {p.stem for p in (Path(conf_dir()) / group).glob("*.yaml")}
    node = ConfigStore.instance().repo
    for part in group.split("/"):
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        names |= {k.removesuffix(".yaml") for k in node if k.endswith(".yaml")}
    return sorted(n for n in names if not n.startswith(SCHEMA_PREFIX))


NOT_GROUPS = ("hydra", "search")  # conf/ folders of no train option (search: rltool tune's)


def groups() -> list[str]:
    """The config groups a user chooses options of (``conf/<group>/``)."""
    from pathlib import Path

    return sorted(
        p.name for p in Path(conf_dir()).iterdir() if p.is_dir() and p.name not in NOT_GROUPS
    )


def _groups_help() -> str:
    """``rltool train --help``'s list of groups and options (Hydra's own lists the schemas)."""
    return "\n".join(f"{g}: {', '.join(options(g))}" for g in groups())


def to_config(cfg: DictConfig) -> Config:
    """The composed config as typed objects; raises ConfigError on an unknown key or an impossible
    value."""
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = [k for k in cfg if k not in known]
    if unknown:  # Hydra lets "+key=value" append to a structured config
        raise ConfigError(
            f"unknown config key '{unknown[0]}': check the spelling "
            "(rltool train --cfg job lists every key)"
        )
    return OmegaConf.to_object(cfg)


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested config dict as ``{"group.key": value}`` (an empty dict stays a value)."""
    out = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def compose(*overrides: str) -> Config:
    """The config ``rltool train <overrides>`` would run (``rltool.compose``): the same files,
    the same checks.

    Raises:
        ConfigError: Bad input (``rltool.errors``); Hydra's own error for an override that does
            not parse or names no option.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_configs()
    if GlobalHydra.instance().is_initialized():  # inside a Hydra app: its loader is ours
        return to_config(hydra_compose("config", overrides=list(overrides)))
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        return to_config(hydra_compose("config", overrides=list(overrides)))


# ---- where the configs live ----
def conf_dir() -> str:
    """The packaged configs (wheel: rltool/conf) or the repo's top-level conf/ (source)."""
    from pathlib import Path

    package = Path(__file__).resolve().parent.parent  # rltool/
    packaged = package / "conf"
    return str(packaged if packaged.is_dir() else package.parent / "conf")
