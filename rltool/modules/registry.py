"""The torso's memory built from ``policy.kind``: the torch side of the memory registry
(``rltool/memories.py`` knows the names, their config keys and classes)."""

from __future__ import annotations

import dataclasses

from torch import nn

from rltool import memories


def build_memory(cfg, input_size: int, state_prefix: str = "") -> nn.Module:
    """The memory of ``cfg.kind`` (a checked :class:`rltool.config.PolicyConfig`) on
    ``input_size`` features, its state keys prefixed with ``state_prefix`` (the critic's torso:
    "critic_"); the fields of ``cfg.memory`` are the class's keyword arguments."""
    cls = memories.get(cfg.kind).load()
    own = {f.name: getattr(cfg.memory, f.name) for f in dataclasses.fields(cfg.memory)}
    return cls(
        input_size,
        cfg.hidden_size,
        cfg.num_layers,
        state_keys=[state_prefix + k for k in cls.default_state_keys],
        force_sequential=cfg.recurrent_mode == "sequential",
        **own,
    )
