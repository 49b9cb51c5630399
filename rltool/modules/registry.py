"""``policy.kind`` -> memory module: the only place that maps a kind's name to its class."""

from __future__ import annotations

from torch import nn

from rltool.modules.ffm import FFMModule
from rltool.modules.mingru import MinGRUModule
from rltool.modules.recurrent import GRUModule, LSTMModule
from rltool.modules.trxl import TrXLModule

MEMORIES = {
    "lstm": LSTMModule,
    "gru": GRUModule,
    "mingru": MinGRUModule,
    "ffm": FFMModule,
    "trxl": TrXLModule,
}


def build_memory(cfg, input_size: int, state_prefix: str = "") -> nn.Module:
    """The memory of ``cfg.kind`` (a :class:`rltool.config.PolicyConfig`) on ``input_size``
    features, its state keys prefixed with ``state_prefix`` (the critic's torso: "critic_").
    A class may read its own config keys with ``config_kwargs(cfg)``."""
    cls = MEMORIES[cfg.kind]
    kw = cls.config_kwargs(cfg) if hasattr(cls, "config_kwargs") else {}
    return cls(
        input_size,
        cfg.hidden_size,
        cfg.num_layers,
        state_keys=[state_prefix + k for k in cls.default_state_keys],
        force_sequential=cfg.recurrent_mode == "sequential",
        **kw,
    )
