"""A user's memory, registered as rltool's own are (rltool/memories.py): a tiny gated RNN with a
config key of its own. Chosen with ``policy.kind=custom_memory:tiny`` (tests/ is on the path)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from rltool import memories
from rltool.errors import ConfigError
from rltool.modules.memory import Memory
from rltool.specs import Spec


@dataclass
class TinyConfig:
    forget_bias: float = 1.0  # f = sigmoid(... + forget_bias): larger keeps more of the past

    def __post_init__(self):
        if not math.isfinite(self.forget_bias):
            raise ConfigError(f"policy.memory.forget_bias={self.forget_bias!r}: must be finite")


class TinyGatedRNN(Memory):
    """Per layer h_t = f * h_{t-1} + (1 - f) * tanh(c), [f, c] = W [x_t, h_{t-1}] + b.
    State ``tiny_h`` [num_layers, hidden]. Only ``_step``: temporal mode is the step loop."""

    default_state_keys = ("tiny_h",)

    def __init__(self, input_size, hidden_size, num_layers=1, forget_bias=1.0, **kw):
        super().__init__(input_size, hidden_size, num_layers, **kw)
        self.forget_bias = forget_bias
        self.layers = nn.ModuleList(
            nn.Linear((input_size if i == 0 else hidden_size) + hidden_size, 2 * hidden_size)
            for i in range(num_layers)
        )

    @property
    def state_specs(self) -> dict:
        return {self.state_keys[0]: Spec((self.num_layers, self.hidden_size))}

    def _step(self, x, states, reset):
        """x [n, F], states ([n, L, H],), reset [n] -> y [n, H], ([n, L, H],)."""
        h_prev = states[0].masked_fill(reset.view(-1, 1, 1), 0.0)
        h, out = x, []
        for i, layer in enumerate(self.layers):
            f, c = layer(torch.cat([h, h_prev[:, i]], -1)).chunk(2, -1)
            f = torch.sigmoid(f + self.forget_bias)
            h = f * h_prev[:, i] + (1 - f) * torch.tanh(c)
            out.append(h)
        return h, (torch.stack(out, 1),)


SPEC = memories.register(memories.MemorySpec("tiny", TinyConfig, TinyGatedRNN))
