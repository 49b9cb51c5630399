"""LSTM and GRU modules with ``is_init`` resets and two recurrent modes that give the same numbers.

State layout, per batch element: ``[num_layers, hidden_size]`` under each state key (LSTM: ``h`` and
``c``; GRU: ``h``). The state before a step is read from the root, the state after it is written
under ``("next", key)``. Where ``is_init`` is True the module starts from zeros.

Modes:
- *sequential*: one step for a batch of any leading dims ``[*B]`` (acting); given a time dim, a
  Python loop of such steps (the debugging path).
- *temporal*: a whole ``[T, *B]`` sequence at once: the columns are cut into segments at every
  ``is_init``, the segments become lanes sorted by length, and each layer runs as a few fused calls
  over time chunks of the lanes still running (see :class:`_Lanes`); the outputs are gathered back.
  Padding all segments to the longest costs ~4-6x the work at 2-10% resets, one call per reset
  time ~40-130 calls: the chunks are chosen to minimise work + calls (scripts/bench_recurrent.py).
  Per-step states (needed only by the TensorDict path) are the layer outputs and, for the LSTM
  cell state, a parallel scan of ``c_t = f_t * c_{t-1} + i_t * g_t`` in the [T, B] layout.

The mode, the leading-dim flattening, the step loop and the TensorDict path are the base class's
(:class:`rltool.modules.memory.Memory`); this file holds the fused per-layer calls.
"""

from __future__ import annotations

import bisect

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rltool import keys as K
from rltool.modules.gru_kernel import gru_sequences
from rltool.modules.memory import Memory, recurrent_mode
from rltool.modules.scan import linear_scan
from rltool.specs import Spec

__all__ = ["GRUModule", "LSTMModule", "RecurrentModule", "recurrent_mode"]  # the mode: memory.py


def _chunk_bounds(length: list[int], call_cost: float) -> tuple[list[int], list[int]]:
    """Time bounds ``[0, .., max(length)]`` and lane counts of the chunks that minimise the
    estimated cost ``sum_k(len_k * n_k + call_cost)`` (in lane-steps). ``length`` is sorted
    descending. Dynamic programming over the distinct lengths (a bound elsewhere never helps):
    ``best[j] = min_i best[i] + (pts[j] - pts[i]) * alive[i] + call_cost``, a minimum of lines in
    ``pts[j]`` with falling slopes queried at rising x, so a monotone convex hull makes it O(m)."""
    asc = length[::-1]
    pts = [0, *sorted(set(length))]
    alive = [len(asc) - bisect.bisect_right(asc, a) for a in pts]  # lanes running after pts[i]
    at = lambda line, x: line[0] * x + line[1]
    best, prev, hull, k = [0.0], [0], [], 0
    for j in range(1, len(pts)):
        new = (alive[j - 1], best[j - 1] - pts[j - 1] * alive[j - 1], j - 1)
        while len(hull) > 1 and (new[1] - hull[-2][1]) * (hull[-2][0] - hull[-1][0]) <= (
            hull[-1][1] - hull[-2][1]
        ) * (hull[-2][0] - new[0]):
            hull.pop()  # the last line is never below both neighbours
        hull.append(new)
        k = min(k, len(hull) - 2)
        while k + 1 < len(hull) and at(hull[k + 1], pts[j]) <= at(hull[k], pts[j]):
            k += 1
        best.append(at(hull[k], pts[j]) + call_cost)
        prev.append(hull[k][2])
    bounds = [len(pts) - 1]
    while bounds[-1]:
        bounds.append(prev[bounds[-1]])
    bounds.reverse()
    return [pts[b] for b in bounds], [alive[b] for b in bounds[:-1]]


class _Lanes:
    """The segments of a [T, N] ``is_init`` pattern as lanes sorted by length, longest first, run
    in a few time chunks: chunk k covers steps [a_k, a_{k+1}) of the n_k lanes still running (a
    prefix), so the work is close to T * N lane-steps, like a packed sequence, while each chunk is
    one fused call. A lane's state at the end of a chunk starts the next one; lanes that begin a
    column continue its stored state, the others start from zeros. The indices are built on the
    host (numpy): a few small ops, each far cheaper than a torch op."""

    def __init__(self, init: torch.Tensor, call_cost: float):
        T, N = init.shape
        starts = init.T.cpu().numpy().copy()
        starts[:, 0] = True
        first = np.flatnonzero(starts)  # column-major n * T + t of each segment's first step
        length = np.diff(first, append=N * T)
        order = np.argsort(-length, kind="stable")
        length, first = length[order], first[order]
        t0, col = first % T, first // T
        start = t0 * N + col  # time-major index of each lane's first step
        bounds, self.counts = _chunk_bounds(length.tolist(), call_cost)
        self.steps = np.diff(bounds).tolist()
        src = []
        for a, b, n in zip(bounds[:-1], bounds[1:], self.counts, strict=True):
            p = np.arange(a, b)[:, None]
            src.append(np.where(p < length[:n], start[:n] + p * N, T * N).reshape(-1))
        src = np.concatenate(src)  # chunk buffer row -> time-major step (T * N: padding)
        dst = np.empty(T * N, dtype=np.int64)
        valid = np.flatnonzero(src < T * N)
        dst[src[valid]] = valid  # time-major step -> chunk buffer row
        init_src = np.where(t0 == 0, col, N)  # stored state of the column, or zeros
        to = lambda a: torch.from_numpy(a).to(init.device)
        self.src, self.dst, self.init_src = to(src), to(dst), to(init_src)
        self.T, self.N = T, N

    def split(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[T, N, F] -> chunk inputs [len_k, n_k, F]."""
        flat = torch.cat([x.reshape(self.T * self.N, -1), x.new_zeros(1, x.shape[-1])])
        buf = flat.index_select(0, self.src).split([s * n for s, n in self._shapes()])
        return [b.view(s, n, -1) for b, (s, n) in zip(buf, self._shapes(), strict=True)]

    def merge(self, ys: list[torch.Tensor]) -> torch.Tensor:
        """Chunk outputs [len_k, n_k, H] -> [T, N, H]."""
        buf = torch.cat([y.reshape(-1, y.shape[-1]) for y in ys])
        return buf.index_select(0, self.dst).view(self.T, self.N, -1)

    def initial(self, s: torch.Tensor) -> torch.Tensor:
        """Stored states of the columns [N, H] -> initial states of the lanes [1, S, H]."""
        return torch.cat([s, s.new_zeros(1, s.shape[-1])]).index_select(0, self.init_src)[None]

    def _shapes(self):
        return zip(self.steps, self.counts, strict=True)


def _weights(layer: nn.RNNBase) -> tuple[torch.Tensor, ...]:
    """A one-layer torch RNN's weights in the order of the fused ops (which skip nn.LSTM's and
    nn.GRU's per-call argument checks: ~50 us a call)."""
    return (layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0)


class RecurrentModule(Memory):
    """Base of :class:`LSTMModule` and :class:`GRUModule` (one fused torch RNN per layer)."""

    rnn_cls: type[nn.RNNBase]

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
        super().__init__(
            input_size,
            hidden_size,
            num_layers,
            in_keys,
            out_keys,
            state_keys,
            default_mode,
            force_sequential,
        )
        self.layers = nn.ModuleList(
            self.rnn_cls(input_size if i == 0 else hidden_size, hidden_size)
            for i in range(num_layers)
        )
        self.call_cost = 128.0  # a fused call costs about as much as this many lane-steps (CPU)
        self._lanes_cache: tuple | None = None  # (is_init, its identity, lanes or None)

    @property
    def state_specs(self) -> dict:
        return {k: Spec((self.num_layers, self.hidden_size)) for k in self.state_keys}

    # ---- tensor level (Memory.run flattens the leading dims) ----
    def _step(self, x, states, reset):
        """One step: x [n, F], states [n, L, H], reset [n] -> y [n, H], next states [n, L, H]."""
        states = [s.masked_fill(reset.view(-1, 1, 1), 0.0) for s in states]
        h, per_layer = x, []
        for i, layer in enumerate(self.layers):
            hn = self._cell(layer, h, tuple(s[:, i] for s in states))
            per_layer.append(hn)
            h = hn[0]
        return h, tuple(torch.stack([hn[k] for hn in per_layer], 1) for k in range(len(states)))

    def _scan(self, x, states, is_init, need_states):
        """The temporal mode: x [T, N, F], states at t=0 [N, L, H], is_init [T, N] -> y
        [T, N, H] and the states after each step [T, N, L, H] (or None)."""
        return self._scan_group([self], [x], [states], is_init, need_states)[0]

    def _scan_group(self, memories, xs, states, is_init, need_states):
        """:meth:`_scan` of memories of this class and sizes over the same is_init, each
        layer's chunks of all of them in one call (:meth:`_call_group`)."""
        lanes = self._lanes(is_init)
        init = [[s.masked_fill(is_init[0].view(-1, 1, 1), 0.0) for s in st] for st in states]
        h = [lanes.split(x) if lanes else [x] for x in xs]  # per memory, its chunks
        layer_io = [[x] for x in xs]  # every layer's input and output as [T, N, .] (states)
        for i in range(self.num_layers):
            layers = [m.layers[i] for m in memories]
            state = [
                tuple(lanes.initial(s[:, i]) if lanes else s[None, :, i] for s in st) for st in init
            ]
            outs = [[] for _ in memories]
            for k in range(len(h[0])):  # one call per chunk; the lanes still running: a prefix
                n = h[0][k].shape[1]
                called = self._call_group(
                    layers, [hm[k] for hm in h], [tuple(s[:, :n] for s in st) for st in state]
                )
                for out, (y, _) in zip(outs, called, strict=True):
                    out.append(y)
                state = [st for _, st in called]
            h = outs
            if need_states:
                for io, hm in zip(layer_io, h, strict=True):
                    io.append(lanes.merge(hm) if lanes else hm[0])
        ys = [lanes.merge(hm) if lanes else hm[0] for hm in h]
        if not need_states:
            return [(y, None) for y in ys]
        keep = (~is_init).unsqueeze(-1).to(xs[0].dtype)
        return [
            (y, m._states_after(io, st, keep))
            for m, y, io, st in zip(memories, ys, layer_io, init, strict=True)
        ]

    def _states_after(self, layer_io, init, keep):
        """Per-step states [T, N, L, H] of every layer from their inputs and outputs."""
        per_layer = [
            self._sequence_states(
                layer, layer_io[i], layer_io[i + 1], [s[:, i] for s in init], keep
            )
            for i, layer in enumerate(self.layers)
        ]
        return tuple(torch.stack(s, -2) for s in zip(*per_layer, strict=True))

    def _call_group(self, layers, xs, states):
        """One fused call per layer (each memory's layer i over a chunk): [(y, state after)]."""
        return [self._call(layer, x, st) for layer, x, st in zip(layers, xs, states, strict=True)]

    def _lanes(self, is_init: torch.Tensor) -> _Lanes | None:
        """The lanes of ``is_init`` [T, N] (None without a reset after t=0), reused while the
        same unchanged tensor comes back, as in PPO's epochs over one rollout: the reference held
        keeps its memory from being reused, and an in-place write bumps its version. (A write
        through a numpy view of it bumps nothing: don't.)"""
        key = None  # an inference tensor has no version counter to check: never cached
        if not is_init.is_inference():
            key = (is_init.data_ptr(), is_init.device, is_init.shape, is_init.stride())
            key += (is_init._version, self.call_cost)
            if self._lanes_cache is not None and self._lanes_cache[1] == key:
                return self._lanes_cache[2]
        lanes = _Lanes(is_init, self.call_cost) if bool(is_init[1:].any()) else None
        if key is not None:
            self._lanes_cache = (is_init, key, lanes)
        return lanes

    # ---- cell specifics ----
    def _cell(self, layer, x, state):
        """One step on the layer's weights (the bare cell: a fused call costs ~10x more per
        step): x [n, F], state tuple of [n, H] -> the state after it (h first)."""
        raise NotImplementedError

    def _call(self, layer, x, state):
        """One fused call: x [T', n, F], state tuple of [1, n, H] -> y, the state after it."""
        raise NotImplementedError

    def _sequence_states(self, layer, x, y, init, keep):
        """Per-step states of one layer from its input x and output y [T, N, .], the states at
        t=0 init [N, H] (zero where reset) and keep [T, N, 1] (0 at resets)."""
        raise NotImplementedError

    def _flags(self) -> tuple:
        """The fused op's arguments after its weights, in the order of ``aten::lstm.input(Tensor
        input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout,
        bool train, bool bidirectional, bool batch_first)`` (``aten::gru.input``: the same with
        one hx Tensor); the LSTM and the GRU pass the same."""
        has_biases, num_layers, dropout = True, 1, 0.0  # one layer per call: _scan stacks them
        # cuDNN's backward needs the training forward; with dropout 0 the flag changes no number
        # (torch's CPU kernels, oneDNN's LSTM included: the same outputs and gradients)
        train = self.training
        bidirectional, batch_first = False, False  # time-major [T, n, F]
        return has_biases, num_layers, dropout, train, bidirectional, batch_first


class LSTMModule(RecurrentModule):
    rnn_cls = nn.LSTM
    default_state_keys = (K.RECURRENT_STATE_H, K.RECURRENT_STATE_C)

    def _call(self, layer, x, state):
        y, h, c = torch.lstm(x, state, _weights(layer), *self._flags())
        return y, (h, c)

    def _cell(self, layer, x, state):
        return torch.lstm_cell(x, state, *_weights(layer))

    def _sequence_states(self, layer, x, y, init, keep):
        # the cell state is not returned per step: recompute the gates from the known h_{t-1}
        # and solve c_t = f_t * c_{t-1} + i_t * g_t by a parallel scan, f_t zeroed at resets
        h0, c0 = init
        h_prev = torch.cat([h0.unsqueeze(0), y[:-1]]) * keep
        gates = F.linear(x, layer.weight_ih_l0, layer.bias_ih_l0) + F.linear(
            h_prev, layer.weight_hh_l0, layer.bias_hh_l0
        )
        gi, gf, gg, _ = gates.chunk(4, -1)
        f = torch.sigmoid(gf) * keep
        u = torch.sigmoid(gi) * torch.tanh(gg)
        u = torch.cat([(u[0] + f[0] * c0).unsqueeze(0), u[1:]])
        return y, linear_scan(f, u)


class GRUModule(RecurrentModule):
    rnn_cls = nn.GRU
    default_state_keys = (K.RECURRENT_STATE_H,)

    def __init__(self, *args, kernel: str = "rltool", **kwargs):
        super().__init__(*args, **kwargs)
        # "rltool": gru_kernel.py's sequence on CPU (config policy.memory.kernel)
        self.kernel = kernel

    def joins(self, memories) -> bool:
        # rltool's kernel runs GRUs of one width in one loop: a policy's actor and critic
        # cost about what one does (each step's ops cost their dispatch, not their arithmetic)
        return all(
            type(m) is type(self)
            and m.kernel == "rltool"
            and (m.hidden_size, m.num_layers) == (self.hidden_size, self.num_layers)
            for m in memories
        )

    def _call_group(self, layers, xs, states):
        if self.kernel == "rltool" and xs[0].device.type == "cpu":
            weights = [_weights(layer) for layer in layers]
            outs = gru_sequences(xs, [s[0] for s in states], weights)
            return [(y, (h,)) for y, h in outs]
        return super()._call_group(layers, xs, states)

    def _call(self, layer, x, state):  # torch's GRU (the kernel is chosen in _call_group)
        y, h = torch.gru(x, state[0], _weights(layer), *self._flags())
        return y, (h,)

    def _cell(self, layer, x, state):
        return (torch.gru_cell(x, state[0], *_weights(layer)),)

    def _sequence_states(self, layer, x, y, init, keep):
        return (y,)
