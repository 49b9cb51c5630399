"""A saved run read back: its ``config.yaml`` straight into the schemas, and what a resume may
change. The one way both ``rltool train resume=<run_dir>`` (``rltool.cli.resume_argv``) and
``rltool.resume`` / ``rltool.saved_config`` (``rltool.api``) read a run's config."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from rltool.config import Config
from rltool.config.store import SCHEMAS, to_config
from rltool.errors import ConfigError, UserError
from rltool.runfolder import layout
from rltool.version import __version__

# keys a resume may change: the budget, logging, checkpointing, evaluation cadence, threads
SAFE_KEYS = (
    "total_frames",
    "num_threads",
    "compile",  # the same numbers up to rounding; checkpoints load either way
    "eval.every_frames",
    "eval.episodes",
    "logger",
    "checkpoint",
    "resume",
    "distributed",  # the world size itself is checked against the checkpoint's
)


def is_safe(key: str) -> bool:
    """Whether a resume may change ``key`` (a dotted config key)."""
    return any(key == k or key.startswith(k + ".") for k in SAFE_KEYS)


def check_changes(keys: Iterable[str]) -> None:
    """Refuses the first of ``keys`` (dotted, as a user typed them) a resume may not change:
    one-line UserError naming it and the keys that may change."""
    for key in keys:
        if not is_safe(key):
            raise UserError(
                f"{key} cannot change when resuming (only {', '.join(SAFE_KEYS[:-1])} may): "
                "start a new run to change it"
            )


def read_saved(path: str | os.PathLike) -> dict:
    """A saved ``config.yaml`` as a plain dict in today's layout (older runs' memory keys
    migrated, ``rltool.memories.migrate``); an unreadable file is a one-line UserError."""
    from rltool import memories

    try:
        saved = OmegaConf.to_container(OmegaConf.load(path))
    except Exception as e:  # noqa: BLE001 - a broken file is one line
        raise UserError(f"{path} is not readable YAML ({e}): restore it") from None
    if not isinstance(saved, dict):
        raise UserError(f"{path} does not hold a config: restore it")
    return memories.migrate(saved)


def load(run_dir: str | os.PathLike) -> DictConfig:
    """The run's ``config.yaml`` in the schemas (``rltool.config.Config``, the loss's by its
    name): a typed node, every key the file lacks at the schema's default.

    Raises:
        UserError: no ``config.yaml`` in ``run_dir``, or an unreadable one; a key this version
            does not know (ConfigError) names the version that wrote the file and what to do.
    """
    path = layout.RunFolder(run_dir).config
    if not path.is_file():
        raise UserError(f"{run_dir} is not an rltool run folder (no {layout.CONFIG})")
    saved = read_saved(path)
    try:
        return OmegaConf.merge(_schemas(saved), saved)
    except ConfigKeyError as e:
        raise ConfigError(_unknown_key(path, e.full_key or str(e.key))) from None


def saved_config(run_dir: str | os.PathLike, *overrides: str) -> Config:
    """The typed config of the run in ``run_dir``, with overrides of the keys a resume may change.

    Args:
        run_dir (str | os.PathLike): The run folder (its ``config.yaml``).
        *overrides (str): ``"key=value"`` of the keys a resume may change.

    Returns:
        rltool.config.Config: The saved config, every key it lacks at the schema's default.

    Raises:
        rltool.errors.UserError: No or an unreadable ``config.yaml``, or an override of a key a
            resume may not change.
        rltool.errors.ConfigError: A saved key this version does not know (naming the version
            that wrote the file).

    Example:
        ```python
        cfg = rltool.saved_config("runs/lstm", "total_frames=40000")
        ```
    """
    node = load(run_dir)
    check_changes(item.partition("=")[0] for item in overrides)
    return to_config(OmegaConf.merge(node, OmegaConf.from_dotlist(list(overrides))))


def _schemas(saved: dict) -> DictConfig:
    """The structured config every group of ``saved`` is merged into (the loss's by its name)."""
    from rltool import algos

    groups = {g: OmegaConf.structured(s) for g, s in SCHEMAS.items()}
    loss = saved.get("loss")
    if isinstance(loss, dict) and "name" in loss:
        groups["loss"] = OmegaConf.structured(algos.get(loss["name"]).config)
    return OmegaConf.merge(OmegaConf.structured(Config), groups)


BEFORE_VERSIONS = "an rltool version from before versions were recorded"


def _unknown_key(path: Path, key: str) -> str:
    """The refusal of a saved key this version does not know: the user never typed it."""
    version = layout.written_by(path.parent)
    if version == __version__:  # this version wrote it: the file was edited since
        return (
            f"{path} holds the key '{key}', unknown to rltool {__version__} (which wrote the "
            "file: it was edited since): remove the key, or start a new run"
        )
    writer = f"rltool {version}" if version else BEFORE_VERSIONS
    return (
        f"{path} holds the key '{key}', unknown to rltool {__version__}: the run's "
        f"{layout.CONFIG} was written by {writer}; resume it with that version, or start a new run"
    )
