"""LSTM and GRU modules with ``is_init`` resets and two recurrent modes that give the same numbers.

State layout, per batch element: ``[num_layers, hidden_size]`` under each state key (LSTM: ``h`` and
``c``; GRU: ``h``). The state before a step is read from the root, the state after it is written
under ``("next", key)``. Where ``is_init`` is True the module starts from zeros.

Modes:
- *sequential*: one step for a batch of any leading dims ``[*B]`` (acting); given a time dim, a
  Python loop of such steps (the debugging path).
- *temporal*: a whole ``[T, *B]`` sequence at once: the columns are cut into segments at every
  ``is_init``, the segments are padded side by side and every layer runs once, fused; the outputs
  are scattered back. Per-step states (needed only by the TensorDict path) come from the layer
  outputs and, for the LSTM cell state, from a parallel scan of ``c_t = f_t * c_{t-1} + i_t * g_t``.

The mode is: ``sequential`` if the module is forced to it (config ``recurrent_mode=sequential``),
else the active :func:`recurrent_mode` context, else the module's ``default_mode``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch
from tensordict import TensorDictBase
from torch import nn

from rltool import keys as K
from rltool.ops import linear_scan
from rltool.specs import Spec

MODES = ("sequential", "temporal")
_ACTIVE_MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rltool_rnn_mode", default=None
)


@contextlib.contextmanager
def recurrent_mode(mode: str):
    """Run recurrent modules in ``mode`` ("sequential" | "temporal") inside the block."""
    if mode not in MODES:
        raise ValueError(f"unknown recurrent mode {mode!r}: choose one of {', '.join(MODES)}")
    token = _ACTIVE_MODE.set(mode)
    try:
        yield
    finally:
        _ACTIVE_MODE.reset(token)


class _Segments:
    """Where the segments of a [T, N] ``is_init`` pattern sit in a padded [T_max, S] layout."""

    def __init__(self, init: torch.Tensor):
        T, N = init.shape
        starts = init.T.clone()
        starts[:, 0] = True
        flat = starts.reshape(-1)  # column-major: index n * T + t
        self.seg = flat.cumsum(0) - 1
        start_idx = flat.nonzero().squeeze(1)
        self.pos = torch.arange(N * T, device=init.device) - start_idx[self.seg]
        self.num = int(start_idx.numel())
        self.t_max = int(torch.bincount(self.seg).max())
        self.first = (start_idx % T) == 0  # segments that start at t=0 continue the stored state
        self.col = start_idx // T
        self.T, self.N = T, N

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[T, N, *f] -> [T_max, S, *f]."""
        out = x.new_zeros(self.t_max, self.num, *x.shape[2:])
        out[self.pos, self.seg] = x.transpose(0, 1).reshape(self.T * self.N, *x.shape[2:])
        return out

    def unpad(self, y: torch.Tensor) -> torch.Tensor:
        """[T_max, S, *f] -> [T, N, *f]."""
        return y[self.pos, self.seg].reshape(self.N, self.T, *y.shape[2:]).transpose(0, 1)

    def initial(self, s: torch.Tensor) -> torch.Tensor:
        """Stored states of the columns [N, *f] -> initial states of the segments [S, *f]."""
        out = s.new_zeros(self.num, *s.shape[1:])
        out[self.first] = s[self.col[self.first]]
        return out


class RecurrentModule(nn.Module):
    """Base of :class:`LSTMModule` and :class:`GRUModule` (one fused torch RNN per layer)."""

    rnn_cls: type[nn.RNNBase]
    default_state_keys: tuple[str, ...]

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        in_keys=("embed",),
        out_keys=("features",),
        state_keys=None,
        default_mode: str = "sequential",
        force_sequential: bool = False,
    ):
        super().__init__()
        if default_mode not in MODES:
            raise ValueError(f"unknown recurrent mode {default_mode!r}")
        self.layers = nn.ModuleList(
            self.rnn_cls(input_size if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers)
        )
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.in_keys, self.out_keys = list(in_keys), list(out_keys)
        self.state_keys = list(state_keys or self.default_state_keys)
        self.default_mode, self.force_sequential = default_mode, force_sequential

    @property
    def state_specs(self) -> dict:
        return {k: Spec((self.num_layers, self.hidden_size)) for k in self.state_keys}

    @property
    def mode(self) -> str:
        if self.force_sequential:
            return "sequential"
        return _ACTIVE_MODE.get() or self.default_mode

    # ---- tensor level ----
    def run(
        self,
        x: torch.Tensor,
        states: tuple[torch.Tensor, ...],
        is_init: torch.Tensor,
        time_dim: bool,
        need_states: bool = True,
    ):
        """One step (``time_dim=False``: x [*B, F], states [*B, L, H], is_init [*B, 1]) or a
        sequence (x [T, *B, F], states at t=0 [*B, L, H], is_init [T, *B, 1]).
        Returns y [.., H] and the next states ([.., L, H] per step; None when a sequence is run
        with ``need_states=False``)."""
        if not time_dim:
            return self._step(x, states, is_init)
        lead = x.shape[1:-1]
        n = math.prod(lead)
        x = x.reshape(x.shape[0], n, x.shape[-1])
        states = tuple(s.reshape(n, *s.shape[-2:]) for s in states)
        is_init = is_init.reshape(x.shape[0], n)
        if self.mode == "sequential":
            y, nxt = self._loop(x, states, is_init)
        else:
            y, nxt = self._temporal(x, states, is_init, need_states)
        y = y.reshape(x.shape[0], *lead, -1)
        if nxt is not None:
            nxt = tuple(s.reshape(x.shape[0], *lead, *s.shape[-2:]) for s in nxt)
        return y, nxt

    def _step_one_layer(self, x, states, is_init):
        """``_step`` for one layer and a [B] batch (the acting hot path) in as few ops as possible:
        the [B, 1, H] states are [1, B, H] views, and where no row starts an episode (checked on
        the CPU only: elsewhere it would wait for the device) nothing needs zeroing."""
        if is_init.device.type != "cpu" or bool(is_init.any()):
            reset = is_init.reshape(-1, 1, 1)
            states = [s.masked_fill(reset, 0.0) for s in states]
        hx = [s.transpose(0, 1).contiguous() for s in states]
        for layer in self.layers:  # the one layer (iterating skips ModuleList's index checks)
            y, hn = layer(x.unsqueeze(0), hx[0] if len(hx) == 1 else tuple(hx))
        return y[0], tuple([s.transpose(0, 1) for s in ((hn,) if len(hx) == 1 else hn)])

    def _step(self, x, states, is_init):
        if x.dim() == 2 and self.num_layers == 1:
            return self._step_one_layer(x, states, is_init)
        lead, n = x.shape[:-1], math.prod(x.shape[:-1])
        reset = is_init.reshape(n, 1, 1)
        states = [s.reshape(n, *s.shape[-2:]).masked_fill(reset, 0.0) for s in states]
        h, per_layer = x.reshape(1, n, x.shape[-1]), []
        for i, layer in enumerate(self.layers):
            h, hn = layer(h, self._layer_state(states, i))
            per_layer.append(hn)
        nxt = self._stack_states(per_layer)
        return h[0].reshape(*lead, -1), tuple(s.reshape(*lead, *s.shape[-2:]) for s in nxt)

    def _loop(self, x, states, is_init):
        ys, nxts = [], []
        for t in range(x.shape[0]):
            y, states = self._step(x[t], states, is_init[t].unsqueeze(-1))
            ys.append(y)
            nxts.append(states)
        return torch.stack(ys), tuple(torch.stack(s) for s in zip(*nxts, strict=True))

    def _temporal(self, x, states, is_init, need_states):
        states = [s.masked_fill(is_init[0].view(-1, 1, 1), 0.0) for s in states]
        seg = _Segments(is_init) if bool(is_init[1:].any()) else None
        h = seg.pad(x) if seg else x
        init = [seg.initial(s) for s in states] if seg else states
        per_layer = []
        for i, layer in enumerate(self.layers):
            h_in = h
            h, _ = layer(h_in, self._layer_state(init, i))
            if need_states:
                per_layer.append(self._sequence_states(layer, h_in, h, init, i))
        y = seg.unpad(h) if seg else h
        if not need_states:
            return y, None
        nxt = [torch.stack(s, -2) for s in zip(*per_layer, strict=True)]  # [T', S, L, H]
        return y, tuple(seg.unpad(s) if seg else s for s in nxt)

    # ---- cell specifics ----
    def _layer_state(self, states, i):
        raise NotImplementedError

    def _stack_states(self, per_layer):
        raise NotImplementedError

    def _sequence_states(self, layer, h_in, h_out, init, i):
        raise NotImplementedError

    # ---- TensorDict level ----
    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """Reads ``in_keys`` (concatenated), the state keys and ``is_init``; writes ``out_keys[0]``
        and ``("next", state_key)``. Temporal mode expects td of batch [T, *B], else [*B]."""
        missing = [k for k in self.state_keys if k not in td.keys(include_nested=True)]
        if missing:
            raise KeyError(
                f"{type(self).__name__}: state key(s) {missing} missing from the input; "
                "the collector (or the caller) must provide the state before the step"
            )
        x = torch.cat([td.get(k) for k in self.in_keys], -1)
        states = tuple(td.get(k) for k in self.state_keys)
        temporal = self.mode == "temporal"
        if temporal:
            states = tuple(s[0] for s in states)
        y, nxt = self.run(x, states, td.get(K.IS_INIT), time_dim=temporal)
        td.set(self.out_keys[0], y)
        for key, s in zip(self.state_keys, nxt, strict=True):
            td.set(K.nxt(key), s)
        return td


class LSTMModule(RecurrentModule):
    rnn_cls = nn.LSTM
    default_state_keys = (K.RECURRENT_STATE_H, K.RECURRENT_STATE_C)

    def _layer_state(self, states, i):
        h, c = states
        return h[:, i].unsqueeze(0).contiguous(), c[:, i].unsqueeze(0).contiguous()

    def _stack_states(self, per_layer):
        return (
            torch.stack([hn[0][0] for hn in per_layer], 1),
            torch.stack([hn[1][0] for hn in per_layer], 1),
        )

    def _sequence_states(self, layer, h_in, h_out, init, i):
        h0, c0 = init[0][:, i], init[1][:, i]
        h_prev = torch.cat([h0.unsqueeze(0), h_out[:-1]])
        gates = torch.nn.functional.linear(
            h_in, layer.weight_ih_l0, layer.bias_ih_l0
        ) + torch.nn.functional.linear(h_prev, layer.weight_hh_l0, layer.bias_hh_l0)
        gi, gf, gg, _ = gates.chunk(4, -1)
        f = torch.sigmoid(gf)
        u = torch.sigmoid(gi) * torch.tanh(gg)
        u = torch.cat([(u[0] + f[0] * c0).unsqueeze(0), u[1:]])
        return h_out, linear_scan(f, u)


class GRUModule(RecurrentModule):
    rnn_cls = nn.GRU
    default_state_keys = (K.RECURRENT_STATE_H,)

    def _layer_state(self, states, i):
        return states[0][:, i].unsqueeze(0).contiguous()

    def _stack_states(self, per_layer):
        return (torch.stack([hn[0] for hn in per_layer], 1),)

    def _sequence_states(self, layer, h_in, h_out, init, i):
        return (h_out,)
