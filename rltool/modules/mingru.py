"""minGRU (Feng et al. 2024, "Were RNNs all we needed?"): a gated RNN whose gates read the input
only, so its recurrence is linear and a whole rollout runs as a parallel scan.

Per layer, on its input x_t [F] (the previous layer's output above the first):

    z_t = sigmoid(W_z x_t + b_z),  h~_t = W_h x_t + b_h,  h_t = (1 - z_t) * h_{t-1} + z_t * h~_t

State per batch element: ``recurrent_state_h`` [num_layers, hidden] (each layer's h). Where
``is_init`` is True the layer starts from h = 0.

Temporal mode solves ``h_t = a_t * h_{t-1} + b_t`` with a_t = (1 - z_t) * keep_t (keep_t = 0 at
a reset, 1 elsewhere) and b_t = z_t * h~_t by :func:`rltool.modules.scan.chunked_scan`: chunks of
sqrt(T) steps solved side by side, then the states carried between them: 2 sqrt(T) Python
iterations of small ops (46 at T=512) and a few whole-tensor ops, never one per step.

Numerical stability, for any rollout length: the scan only multiplies and adds. A reset is a
factor a_t = 0 on the carried state (not log 0 = -inf in a log-space scan), so it cuts the
sum exactly and its gradient (d(a * h)/da = h) is finite; the prefix products of factors in
[0, 1] can only shrink towards 0 (underflow to 0 = a state truly forgotten), never overflow, and
no step divides by a product (no cumprod ratios). Each h_t is a convex combination of h_{t-1}
and h~_t, so |h_t| <= max |h~| whatever T is.
"""

from __future__ import annotations

import torch
from torch import nn

from rltool import keys as K
from rltool.modules.memory import Memory
from rltool.modules.scan import chunked_scan
from rltool.specs import Spec


class MinGRUModule(Memory):
    """Stacked minGRU layers: x [.., F] -> h of the last layer [.., hidden_size]."""

    default_state_keys = (K.RECURRENT_STATE_H,)

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, **kw):
        super().__init__(input_size, hidden_size, num_layers, **kw)
        self.layers = nn.ModuleList(
            nn.Linear(input_size if i == 0 else hidden_size, 2 * hidden_size)
            for i in range(num_layers)
        )

    @property
    def state_specs(self) -> dict:
        return {self.state_keys[0]: Spec((self.num_layers, self.hidden_size))}

    @staticmethod
    def _gates(layer: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [.., F] -> (1 - z, z * h~), each [.., H]; 1 - z as sigmoid(-u), exact near z = 1."""
        u, cand = layer(x).chunk(2, -1)
        return torch.sigmoid(-u), torch.sigmoid(u) * cand

    def _step(self, x, states, reset):
        """x [n, F], states ([n, L, H],), reset [n] -> y [n, H], ([n, L, H],)."""
        h_prev = states[0].masked_fill(reset.view(-1, 1, 1), 0.0)
        h, out = x, []
        for i, layer in enumerate(self.layers):
            a, b = self._gates(layer, h)
            h = a * h_prev[:, i] + b
            out.append(h)
        return h, (torch.stack(out, 1),)

    def _scan(self, x, states, is_init, need_states):
        """x [T, N, F], states ([N, L, H],), is_init [T, N] -> y [T, N, H], ([T, N, L, H],)."""
        keep = (~is_init).unsqueeze(-1).to(x.dtype)  # [T, N, 1]
        h, out = x, []
        for i, layer in enumerate(self.layers):
            a, b = self._gates(layer, h)
            h = chunked_scan(a * keep, b, states[0][:, i])
            out.append(h)
        return h, (torch.stack(out, -2),) if need_states else None
