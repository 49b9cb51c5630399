"""The memory registry: each memory (LSTM, GRU, minGRU, FFM, TrXL, a user's) in one place.

A memory is a :class:`MemorySpec`: its name (``policy.kind``), the dataclass of its own keys
(``policy.memory``), its module (a :class:`~rltool.modules.memory.Memory` subclass, or
``"pkg.mod:Class"`` imported only when a policy is built, so composing a config loads no torch)
and an optional check of the whole policy config. The config fields are the module's keyword
arguments: the builder (``rltool/modules/registry.py``) passes them as they are.

``policy.kind=<python.module>:<name>`` imports ``python.module`` (which registers its spec) and
uses the spec ``<name>``; the stored config keeps the string, so a resume, ``rltool eval`` and
``rltool.load_policy`` import it again. ``mlp`` is no memory and has no spec.

:func:`migrate` turns a config saved before the memory keys moved under ``policy.memory``.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rltool.algos import load_class
from rltool.config.fields import check_fields, choice, ranged
from rltool.errors import MOVED_KEYS, ConfigError

NO_MEMORY = "mlp"  # policy.kind of the memoryless policy
# the builder's own arguments: a memory's config may not use these names
RESERVED = ("input_size", "hidden_size", "num_layers", "state_keys", "force_sequential")


MEMORY_KEYS = "policy.memory"  # where a memory's keys live in the config


@dataclass(frozen=True)
class MemorySpec:
    """What the rest of rltool knows of a memory.

    ``config``: a dataclass of its keys (``policy.memory.<key>``), validated in its own
    ``__post_init__``; its fields are the module's keyword arguments. ``module``: the class,
    built as ``module(input_size, hidden_size, num_layers, state_keys=..., force_sequential=...,
    **config fields)``, or ``"pkg.mod:Class"``. ``check(policy_cfg)``: checks across the policy's
    keys (raises ConfigError), after the memory's own."""

    name: str
    config: type
    module: type | str
    check: Callable | None = None

    def load(self) -> type:
        return load_class(self.module)


_REGISTRY: dict[str, MemorySpec] = {}


def register(spec: MemorySpec) -> MemorySpec:
    """Adds (or replaces) ``spec`` under ``spec.name``; returns it."""
    if spec.name == NO_MEMORY or ":" in spec.name:
        raise ValueError(f"memory name {spec.name!r}: not {NO_MEMORY!r}, and without ':'")
    clash = [f.name for f in dataclasses.fields(spec.config) if f.name in RESERVED]
    if clash:
        raise ValueError(f"memory {spec.name!r}: config key {clash[0]!r} is the builder's own")
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def specs() -> list[MemorySpec]:
    """Every registered memory, built-ins first."""
    return list(_REGISTRY.values())


def kinds() -> tuple[str, ...]:
    """The choices of ``policy.kind``: mlp and every registered memory."""
    return (NO_MEMORY, *_REGISTRY)


def get(kind: str) -> MemorySpec:
    """The spec of ``policy.kind``: a registered name, or ``module:name`` (the module imported
    first, from the working directory or PYTHONPATH). Bad input is a one-line ConfigError."""
    module, _, name = kind.rpartition(":")
    if module:
        if os.getcwd() not in sys.path:  # a user's module of the working directory
            sys.path.insert(0, os.getcwd())
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(
                f"policy.kind={kind!r}: cannot import module {module!r} ({e}); run from the "
                "folder that holds it or add it to PYTHONPATH"
            ) from None
    if name not in _REGISTRY:
        where = f"module {module!r} registers no memory {name!r}: " if module else ""
        raise ConfigError(
            f"policy.kind={kind!r} is invalid: {where}choose one of {', '.join(kinds())}, or "
            "<module>:<name> for a memory that module registers"
        )
    return _REGISTRY[name]


def memory_config(spec: MemorySpec, value):
    """``policy.memory`` (None, a mapping, or the spec's dataclass) -> the spec's dataclass;
    an unknown key is a one-line ConfigError naming the memory's keys."""
    if isinstance(value, spec.config):
        return value
    if value is None:
        value = {}
    if dataclasses.is_dataclass(value):  # another memory's config object
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    if not isinstance(value, Mapping):
        raise ConfigError(f"policy.memory={value!r} is invalid: give a mapping of the keys")
    known = [f.name for f in dataclasses.fields(spec.config)]
    unknown = [k for k in value if k not in known]
    if unknown:
        raise ConfigError(
            f"policy.memory.{unknown[0]} is not a key of memory {spec.name!r} (its keys: "
            f"{', '.join(known) or 'none'}): choose the memory with policy=<kind> (its YAML "
            "sets its keys), or drop the key"
        )
    return spec.config(**dict(value))


# ---- the built-in memories ----
@dataclass
class NoKeys:
    """A memory with no keys of its own (LSTM, minGRU)."""


@dataclass
class GRUConfig:
    # the GRU's training kernel on CPU: rltool = rltool/modules/gru_kernel.py (the actor's and
    # critic's GRU in one loop, faster), torch = torch's GRU; the same maths with different
    # last-bit rounding. Acting and CUDA always use torch's
    kernel: str = choice("rltool", ("rltool", "torch"))

    def __post_init__(self):
        check_fields(self, MEMORY_KEYS)


@dataclass
class FFMConfig:
    # trace size m (null = hidden_size // 2) and context size c; state [layers, 2, m, c]
    trace_size: int | None = ranged(32, ge=1, null=True)
    context_size: int = ranged(4, ge=1)  # c: the context size of each trace

    def __post_init__(self):
        check_fields(self, MEMORY_KEYS)


@dataclass
class TrXLConfig:
    # attention over the last `window` steps, `heads` heads, GTrXL gates if gated
    window: int = ranged(16, ge=1)
    heads: int = ranged(4, ge=1)  # attention heads; policy.hidden_size must be a multiple
    gated: bool = True  # GTrXL's GRU-type gates instead of residual adds
    # the gates' z = sigmoid(... - gate_bias): at 2 (GTrXL's) ~0.12 of the attention's output
    # passes at first, at 0 half; larger starts closer to a memoryless policy
    gate_bias: float = ranged(2.0, finite=True)

    def __post_init__(self):
        check_fields(self, MEMORY_KEYS)


def _check_trxl(policy) -> None:
    heads = policy.memory.heads
    if policy.hidden_size % heads:
        raise ConfigError(
            f"policy.memory.heads={heads!r} is invalid: policy.hidden_size="
            f"{policy.hidden_size} must split into that many heads (a multiple of it)"
        )


for _spec in (
    MemorySpec("lstm", NoKeys, "rltool.modules.recurrent:LSTMModule"),
    MemorySpec("gru", GRUConfig, "rltool.modules.recurrent:GRUModule"),
    MemorySpec("mingru", NoKeys, "rltool.modules.mingru:MinGRUModule"),
    MemorySpec("ffm", FFMConfig, "rltool.modules.ffm:FFMModule"),
    MemorySpec("trxl", TrXLConfig, "rltool.modules.trxl:TrXLModule", _check_trxl),
):
    register(_spec)


# ---- configs saved before the memory keys moved under policy.memory ----
# old flat policy key -> (the memory it belongs to, its key under policy.memory)
MOVED = {
    "trace_size": ("ffm", "trace_size"),
    "context_size": ("ffm", "context_size"),
    "memory_window": ("trxl", "window"),
    "num_heads": ("trxl", "heads"),
    "gated": ("trxl", "gated"),
    "gate_bias": ("trxl", "gate_bias"),
    "gru_kernel": ("gru", "kernel"),
}


MOVED_KEYS.update(
    {f"policy.{old}": f"policy.memory.{new} (policy={kind})" for old, (kind, new) in MOVED.items()}
)


def migrate(config: dict) -> dict:
    """A whole saved config (a plain dict) in today's layout: the run's own memory's flat
    ``policy.<key>`` moved to ``policy.memory.<key>`` (see :data:`MOVED`), the other memories'
    stale flat keys dropped. Today's configs come back equal. A flat key that disagrees with
    the same key under ``policy.memory`` is a one-line ConfigError."""
    policy = config.get("policy") if isinstance(config, dict) else None
    if not isinstance(policy, dict) or not any(k in policy for k in MOVED):
        return config
    policy = dict(policy)
    kind = policy.get("kind", NO_MEMORY)
    memory = dict(policy.get("memory") or {})
    for old, (owner, new) in MOVED.items():
        if old not in policy:
            continue
        value = policy.pop(old)
        if owner != kind:
            continue
        if new in memory and memory[new] != value:
            raise ConfigError(
                f"the saved config has policy.{old}={value!r} and policy.memory.{new}="
                f"{memory[new]!r}: policy.{old} moved to policy.memory.{new}; keep one"
            )
        memory[new] = value
    policy["memory"] = memory if kind != NO_MEMORY else policy.get("memory")
    return {**config, "policy": policy}
