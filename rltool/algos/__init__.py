"""The algorithm registry: each algorithm (PPO, DQN, ...) in one place.

An algorithm is a folder ``rltool/algos/<name>/`` whose ``__init__`` registers an
:class:`AlgoSpec`: its name (the ``loss`` config group's option and ``loss.name``), its config
schema, the heads it trains, cross-group config checks, and the :class:`~rltool.algos.base.
Algorithm` that turns rollouts into gradient steps (imported only when a run is built, so
composing a config loads no torch). ``train.py``, ``config.py``, ``session.py`` and the module
factory ask this registry and never name an algorithm. A user's algorithm registers the same way
(see ``docs/design.md``).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass

from rltool.errors import ConfigError


@dataclass(frozen=True)
class AlgoSpec:
    """What the rest of rltool knows of an algorithm.

    ``config``: the dataclass of the ``loss`` group (fields ``name`` and ``gamma`` at least: the
    env's reward scaler discounts with it). ``heads``: what the policy needs, from ``actor``,
    ``critic``, ``q``. ``algorithm``: the :class:`~rltool.algos.base.Algorithm` subclass, or
    ``"module:Class"`` to import it lazily. ``check(cfg)``: validation of the whole config (raises
    ConfigError), run after every group's own checks. ``data_parallel``: its gradient steps may be
    averaged across ranks (every rank takes the same steps on its own rollout; see
    ``rltool/distributed/ranks.py``). ``rollout_multiple(cfg)``: what a rollout's frame count must
    be a
    multiple of when a distributed rank cuts it short (its minibatch split; None: 1)."""

    name: str
    config: type
    heads: tuple[str, ...]
    algorithm: type | str
    check: Callable | None = None
    data_parallel: bool = False
    rollout_multiple: Callable | None = None

    def load(self) -> type:
        return load_class(self.algorithm)


def load_class(ref: type | str) -> type:
    """``ref`` itself, or the class a ``"pkg.module:Class"`` string names (imported now: the
    registries name classes this way so that composing a config imports no torch)."""
    if isinstance(ref, str):
        module, _, cls = ref.partition(":")
        return getattr(importlib.import_module(module), cls)
    return ref


_REGISTRY: dict[str, AlgoSpec] = {}
_builtins_loaded = False


def register(spec: AlgoSpec) -> AlgoSpec:
    """Adds (or replaces) ``spec`` under ``spec.name``; returns it."""
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _load_builtins() -> None:
    """Imports every algorithm folder of this package once (each registers itself)."""
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        for info in pkgutil.iter_modules(__path__):
            if info.ispkg:
                importlib.import_module(f"{__name__}.{info.name}")


def specs() -> list[AlgoSpec]:
    """Every registered algorithm, built-ins first."""
    _load_builtins()
    return list(_REGISTRY.values())


def data_parallel() -> list[str]:
    """The names of the algorithms that train on several ranks."""
    return [s.name for s in specs() if s.data_parallel]


def get(name: str) -> AlgoSpec:
    """The spec registered as ``name``; an unknown name is a one-line ConfigError."""
    _load_builtins()
    if name not in _REGISTRY:
        raise ConfigError(
            f"loss.name={name!r} names no algorithm: choose one of {', '.join(_REGISTRY)}"
        )
    return _REGISTRY[name]
