"""An attention memory over a stored window (Transformer-XL style, optionally gated as GTrXL,
Parisotto et al. 2020), written from the papers.

State per batch element (not an RNN state):
- ``trxl_window`` [num_layers, M, d]: each layer's *input* at the last M steps, oldest first
  (what Transformer-XL caches), zero where not valid;
- ``trxl_valid`` [M] bool: which of those M steps belong to the current episode.
A zero state is an empty window: where ``is_init`` is True the step sees only itself.

Each layer, for the current step's input e_t [d] (pre-LayerNorm, "identity map reordering"):

    keys/values = LN([window..., e_t])                  M + 1 positions, masked where not valid
    a_t = MultiHeadAttention(LN(e_t), keys/values) + bias[head, position]   (relative position)
    u_t = gate(e_t, relu(a_t));  out_t = gate(u_t, relu(FF(LN(u_t))))

with the GRU-type gate of GTrXL (``gated=True``) or plain residual adds (``gated=False``).
The window then drops its oldest step and appends e_t. Inputs are projected to d first; the
output is LN of the last layer's output [hidden_size = d].

Temporal mode gives every step t exactly its sliding window -- steps t-M..t of the sequence made
of the stored window at the rollout's start followed by the rollout itself -- in batched calls
(one ``unfold`` of the keys and values per layer, no loop over time), with a key masked when it
is not valid at the start or precedes the last ``is_init`` at or before t. Nothing crosses a
reset. The current step is always valid, so no softmax row is empty (no NaN).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from rltool.errors import ConfigError
from rltool.modules.memory import Memory
from rltool.specs import Spec


class _Gate(nn.Module):
    """GTrXL's GRU-type gate: g(x, y) = (1 - z) * x + z * tanh(W_g y + U_g (r * x))."""

    def __init__(self, d: int, bias: float):
        super().__init__()
        self.w = nn.Linear(d, 3 * d)
        self.u = nn.Linear(d, 2 * d, bias=False)
        self.ug = nn.Linear(d, d, bias=False)
        self.bias = bias  # > 0: starts close to the identity (z small)

    def forward(self, x, y):
        wr, wz, wg = self.w(y).chunk(3, -1)
        ur, uz = self.u(x).chunk(2, -1)
        r, z = torch.sigmoid(wr + ur), torch.sigmoid(wz + uz - self.bias)
        return (1 - z) * x + z * torch.tanh(wg + self.ug(r * x))


class _Block(nn.Module):
    def __init__(self, d: int, heads: int, window: int, gated: bool, gate_bias: float):
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.norm, self.norm_ff = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.kv, self.out = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)
        self.pos = nn.Parameter(torch.zeros(heads, window + 1))  # by position, oldest first
        self.ff = nn.Sequential(nn.Linear(d, 2 * d), nn.ReLU(), nn.Linear(2 * d, d))
        self.gates = nn.ModuleList([_Gate(d, gate_bias), _Gate(d, gate_bias)]) if gated else None

    def keys(self, seq: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """seq [.., P, d] -> keys, values [.., P, heads, dh]."""
        k, v = self.kv(self.norm(seq)).chunk(2, -1)
        return k.unflatten(-1, (self.heads, self.dh)), v.unflatten(-1, (self.heads, self.dh))

    def forward(self, e, k, v, valid):
        """e [.., d]; k, v [.., heads, dh, M + 1]; valid [.., M + 1] -> the layer's output."""
        q = self.q(self.norm(e)).unflatten(-1, (self.heads, self.dh))
        # products and sums, not einsum: it becomes one tiny matmul per step and head (~4x slower)
        score = (q.unsqueeze(-1) * k).sum(-2) / self.dh**0.5 + self.pos  # [.., heads, M + 1]
        score = score.masked_fill(~valid.unsqueeze(-2), float("-inf"))
        att = (torch.softmax(score, -1).unsqueeze(-2) * v).sum(-1)  # [.., heads, dh]
        a = self.out(att.flatten(-2))
        if self.gates is None:
            u = e + a
            return u + self.ff(self.norm_ff(u))
        u = self.gates[0](e, F.relu(a))
        return self.gates[1](u, F.relu(self.ff(self.norm_ff(u))))


class TrXLModule(Memory):
    """x [.., F] -> y [.., hidden_size] through ``num_layers`` attention layers over a window of
    ``window`` (M) past steps, ``heads`` heads each."""

    default_state_keys = ("trxl_window", "trxl_valid")

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        window: int = 16,
        heads: int = 4,
        gated: bool = True,
        gate_bias: float = 2.0,
        **kw,
    ):
        if window < 1:
            raise ConfigError(f"policy.memory.window={window!r} is invalid: must be >= 1")
        if heads < 1 or hidden_size % heads:
            raise ConfigError(
                f"policy.memory.heads={heads!r} is invalid: policy.hidden_size={hidden_size} "
                "must split into that many heads (a multiple of it)"
            )
        super().__init__(input_size, hidden_size, num_layers, **kw)
        self.window = window
        self.proj = nn.Linear(input_size, hidden_size)
        self.blocks = nn.ModuleList(
            _Block(hidden_size, heads, window, gated, gate_bias) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(hidden_size)

    @property
    def state_specs(self) -> dict:
        win, valid = self.state_keys
        shape = (self.num_layers, self.window, self.hidden_size)
        return {win: Spec(shape), valid: Spec((self.window,), torch.bool)}

    def _step(self, x, states, reset):
        """x [n, F], states ([n, L, M, d], [n, M]), reset [n] -> y [n, d], next states."""
        valid = states[1] & ~reset.unsqueeze(-1)  # [n, M]
        window = states[0] * valid[:, None, :, None].to(x.dtype)
        keys_valid = torch.cat([valid, valid.new_ones(valid.shape[0], 1)], -1)
        new_valid = keys_valid[:, 1:]
        h, out = self.proj(x), []
        for i, block in enumerate(self.blocks):
            seq = torch.cat([window[:, i], h.unsqueeze(1)], 1)  # [n, M + 1, d]
            k, v = (t.movedim(1, -1) for t in block.keys(seq))  # [n, heads, dh, M + 1]
            out.append(seq[:, 1:] * new_valid.unsqueeze(-1).to(x.dtype))
            h = block(h, k, v, keys_valid)
        return self.norm(h), (torch.stack(out, 1), new_valid)

    def _scan(self, x, states, is_init, need_states):
        """x [T, N, F], states ([N, L, M, d], [N, M]), is_init [T, N] -> y [T, N, d] and the
        states after each step ([T, N, L, M, d], [T, N, M]) or None."""
        M = self.window
        valid = self._keys_valid(states[1], is_init)  # [T, N, M + 1]
        h, out = self.proj(x), []
        for i, block in enumerate(self.blocks):
            seq = torch.cat([states[0][:, i].transpose(0, 1), h])  # [M + T, N, d]
            k, v = (t.unfold(0, M + 1, 1) for t in block.keys(seq))  # [T, N, heads, dh, M + 1]
            if need_states:
                win = seq.unfold(0, M + 1, 1)[..., 1:].transpose(-1, -2)  # [T, N, M, d]
                out.append(win * valid[..., 1:, None].to(x.dtype))
            h = block(h, k, v, valid)
        if not need_states:
            return self.norm(h), None
        return self.norm(h), (torch.stack(out, 2), valid[..., 1:])

    def _keys_valid(self, valid0: torch.Tensor, is_init: torch.Tensor) -> torch.Tensor:
        """Which of the M + 1 keys of step t (steps t-M..t) it may see [T, N, M + 1]: valid in
        the stored window (steps < 0) and not before the last reset at or before t."""
        T, M = is_init.shape[0], self.window
        steps = torch.arange(T, device=is_init.device)
        last = torch.where(is_init, steps[:, None], -M - 1).cummax(0).values  # [T, N]
        key_step = steps[:, None] - M + torch.arange(M + 1, device=is_init.device)  # [T, M + 1]
        after_reset = key_step[:, None, :] >= last[..., None]
        stored = torch.cat([valid0.T, valid0.new_ones(T, valid0.shape[0])])  # [M + T, N]
        return after_reset & stored.unfold(0, M + 1, 1)
