"""Fast and Forgetful Memory (Morad et al., NeurIPS 2023), written from the paper: a memory whose
recurrence is a fixed complex decay, so a rollout runs as a parallel scan.

Per layer, on its input x_t [F] (the previous layer's output above the first), with trace size m
and context size c:

    x~_t = W_1 x_t * sigmoid(W_2 x_t)                        [m]      input gate
    S_t  = gamma * S_{t-1} + x~_t (broadcast over c)          [m, c]   complex
    gamma[j, k] = exp(-|alpha_j|) * exp(i omega_k)                     decay and frequency
    z_t  = W_3 [Re S_t, Im S_t]                               [H]
    g_t  = sigmoid(W_4 x_t);  y_t = LayerNorm(z_t) * g_t + W_5 x_t * (1 - g_t)

State per batch element: ``ffm_state`` [num_layers, 2, m, c] (real and imaginary parts of each
layer's S). Where ``is_init`` is True a layer starts from S = 0.

Temporal mode solves ``S_t = a_t * S_{t-1} + x~_t`` with a_t = gamma * keep_t (keep_t = 0 at a
reset) by :func:`rltool.modules.scan.chunked_scan` on complex tensors (2 sqrt(T) Python iterations
of
small ops, never one per step). Numerically stable for any rollout length: no log-space sums and
no powers gamma^-t (the paper's closed form divides by gamma^t, which overflows on long
rollouts); the scan only multiplies by products of factors of modulus <= 1 and adds, and a reset
is an exact factor 0 with a finite gradient.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rltool.modules.memory import Memory
from rltool.modules.scan import chunked_scan
from rltool.specs import Spec


class _FFMLayer(nn.Module):
    def __init__(self, input_size: int, hidden_size: int, trace: int, context: int):
        super().__init__()
        self.pre = nn.Linear(input_size, 2 * trace)  # W_1 and W_2
        self.mix = nn.Linear(2 * trace * context, hidden_size)  # W_3
        self.skip = nn.Linear(input_size, 2 * hidden_size)  # W_4 and W_5
        self.norm = nn.LayerNorm(hidden_size)
        # decays exp(-|alpha|) spread over [0.5, 0.999] per step, frequencies over [0, pi / 4]
        self.alpha = nn.Parameter(-torch.log(torch.linspace(0.5, 0.999, trace)))
        self.omega = nn.Parameter(torch.linspace(0.0, math.pi / 4, context))
        self.trace, self.context = trace, context

    def gamma(self) -> torch.Tensor:
        """The complex decay [m, c]."""
        return torch.polar(torch.exp(-self.alpha.abs())[:, None], self.omega[None, :])

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """x [.., F] -> x~ [.., m, 1] (complex, broadcast over the context)."""
        v, g = self.pre(x).chunk(2, -1)
        return torch.complex(v * torch.sigmoid(g), torch.zeros_like(v)).unsqueeze(-1)

    def output(self, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """x [.., F], S [.., m, c] complex -> y [.., H]."""
        z = self.mix(torch.cat([s.real, s.imag], -1).flatten(-2))
        g, skip = self.skip(x).chunk(2, -1)
        g = torch.sigmoid(g)
        return self.norm(z) * g + skip * (1 - g)


def _to_complex(s: torch.Tensor) -> torch.Tensor:
    """[.., 2, m, c] real -> [.., m, c] complex."""
    return torch.complex(s[..., 0, :, :], s[..., 1, :, :])


def _to_real(s: torch.Tensor) -> torch.Tensor:
    return torch.stack([s.real, s.imag], -3)


class FFMModule(Memory):
    """Stacked FFM layers: x [.., F] -> y [.., hidden_size]. ``trace_size`` m (default
    hidden_size // 2) and ``context_size`` c set the state [num_layers, 2, m, c]."""

    default_state_keys = ("ffm_state",)

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        trace_size: int | None = None,
        context_size: int = 4,
        **kw,
    ):
        super().__init__(input_size, hidden_size, num_layers, **kw)
        self.trace = trace_size or max(1, hidden_size // 2)
        self.context = context_size
        self.layers = nn.ModuleList(
            _FFMLayer(input_size if i == 0 else hidden_size, hidden_size, self.trace, context_size)
            for i in range(num_layers)
        )

    @property
    def state_specs(self) -> dict:
        return {self.state_keys[0]: Spec((self.num_layers, 2, self.trace, self.context))}

    def _step(self, x, states, reset):
        """x [n, F], states ([n, L, 2, m, c],), reset [n] -> y [n, H], next states."""
        s_prev = _to_complex(states[0].masked_fill(reset.view(-1, 1, 1, 1, 1), 0.0))
        h, out = x, []
        for i, layer in enumerate(self.layers):
            s = layer.gamma() * s_prev[:, i] + layer.inputs(h)
            h = layer.output(h, s)
            out.append(s)
        return h, (_to_real(torch.stack(out, 1)),)

    def export_step(self, x, states, reset):
        """:meth:`_step` in real arithmetic (the same numbers to rounding), for exporters
        without complex tensors (ONNX): S = gamma * S_prev + x~ as its real and imaginary parts."""
        s_prev = states[0].masked_fill(reset.view(-1, 1, 1, 1, 1), 0.0)
        h, out = x, []
        for i, layer in enumerate(self.layers):
            r = torch.exp(-layer.alpha.abs())[:, None]  # [m, 1]
            g_re, g_im = r * torch.cos(layer.omega), r * torch.sin(layer.omega)  # [m, c]
            p_re, p_im = s_prev[:, i, 0], s_prev[:, i, 1]
            v, g = layer.pre(h).chunk(2, -1)
            s_re = g_re * p_re - g_im * p_im + (v * torch.sigmoid(g)).unsqueeze(-1)
            s_im = g_re * p_im + g_im * p_re
            z = layer.mix(torch.cat([s_re, s_im], -1).flatten(-2))
            gate, skip = layer.skip(h).chunk(2, -1)
            gate = torch.sigmoid(gate)
            h = layer.norm(z) * gate + skip * (1 - gate)
            out.append(torch.stack([s_re, s_im], 1))
        return h, (torch.stack(out, 1),)

    def _scan(self, x, states, is_init, need_states):
        """x [T, N, F], states ([N, L, 2, m, c],), is_init [T, N] -> y [T, N, H], states after
        each step ([T, N, L, 2, m, c],) or None."""
        keep = (~is_init).to(x.dtype)[..., None, None]  # [T, N, 1, 1]
        s0 = _to_complex(states[0])
        h, out = x, []
        for i, layer in enumerate(self.layers):
            a = layer.gamma() * keep  # [T, N, m, c]
            s = chunked_scan(a, layer.inputs(h).expand(a.shape), s0[:, i])
            h = layer.output(h, s)
            out.append(s)
        return h, (_to_real(torch.stack(out, -3)),) if need_states else None
