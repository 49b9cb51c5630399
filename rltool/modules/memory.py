"""The base class of every memory module (LSTM, GRU, minGRU, FFM, TrXL, a user's): the sizes and
keys, the recurrent mode, leading-dim flattening, the step loop and the TensorDict path.

A memory carries per batch element one tensor per state key (``state_specs``: any shape). Its
``run(x, states, is_init, time_dim, need_states)`` takes one step (x [*B, F], states [*B, ...],
is_init [*B, 1]) or a sequence (x [T, *B, F], states at t=0 [*B, ...], is_init [T, *B, 1]) and
gives y [.., hidden_size] and the states after each step. Subclasses implement two things on
flat batches (n = prod(*B)):

- ``_step(x [n, F], states [n, ...], reset [n] bool)``: one step, starting from zeros where
  ``reset``; returns y [n, H] and the next states;
- ``_scan(x [T, n, F], states [n, ...], is_init [T, n] bool, need_states)``: the whole sequence
  at once, cut at every ``is_init``; returns y [T, n, H] and the states after each step
  ([T, n, ...]) or None. Optional: the default is the step loop.

Sequential mode of a sequence is a Python loop of ``_step``; temporal mode is ``_scan``. The mode
is ``sequential`` if the module is forced to it (config ``recurrent_mode=sequential``), else the
active :func:`recurrent_mode` context, else the module's ``default_mode``.
"""

from __future__ import annotations

import contextlib
import contextvars
import math

import torch
from tensordict import TensorDictBase
from torch import nn

from rltool import keys as K

MODES = ("sequential", "temporal")
_ACTIVE_MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "rltool_rnn_mode", default=None
)


@contextlib.contextmanager
def recurrent_mode(mode: str):
    """Run memory modules in ``mode`` ("sequential" | "temporal") inside the block."""
    if mode not in MODES:
        raise ValueError(f"unknown recurrent mode {mode!r}: choose one of {', '.join(MODES)}")
    token = _ACTIVE_MODE.set(mode)
    try:
        yield
    finally:
        _ACTIVE_MODE.reset(token)


class Memory(nn.Module):
    """Base of the memory modules. A subclass sets ``default_state_keys`` and ``state_specs``
    and implements ``_step`` and ``_scan`` (see the module docstring)."""

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
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.in_keys, self.out_keys = list(in_keys), list(out_keys)
        self.state_keys = list(state_keys or self.default_state_keys)
        self.default_mode, self.force_sequential = default_mode, force_sequential

    @property
    def mode(self) -> str:
        if self.force_sequential:
            return "sequential"
        return _ACTIVE_MODE.get() or self.default_mode

    # ---- tensor level ----
    def run(self, x, states, is_init, time_dim: bool, need_states: bool = True):
        """See the module docstring. Returns y and the next states (None for a sequence run with
        ``need_states=False`` in temporal mode)."""
        if not time_dim:
            lead = x.shape[:-1]
            n = math.prod(lead)
            flat, shapes = _flatten(states, lead, n)
            y, nxt = self._step(x.reshape(n, -1), flat, is_init.reshape(n))
            return y.reshape(*lead, -1), _unflatten(nxt, lead, shapes)
        if self.mode == "sequential":
            return _sequence(self._loop, x, states, is_init)
        return _sequence(lambda *a: self._scan(*a, need_states), x, states, is_init)

    def joins(self, memories) -> bool:
        """Whether ``memories`` (this one first) can run their sequences in one loop
        (:meth:`_scan_group`); a memory class that can overrides this."""
        return False

    def _scan_group(self, memories, xs, states, is_init, need_states):
        """Temporal mode of several memories over the same is_init [T, n]: xs [T, n, F] and
        states [n, ...] per memory -> [(y, states after each step or None)] per memory."""
        raise NotImplementedError

    def _loop(self, x, states, is_init):
        """The step loop: x [T, n, F], states [n, ...], is_init [T, n] -> y [T, n, H] and the
        states after each step [T, n, ...]."""
        ys, nxts = [], []
        for t in range(x.shape[0]):
            y, states = self._step(x[t], states, is_init[t])
            ys.append(y)
            nxts.append(states)
        return torch.stack(ys), tuple(torch.stack(s) for s in zip(*nxts, strict=True))

    def _step(self, x, states, reset):
        raise NotImplementedError

    def _scan(self, x, states, is_init, need_states):
        """The temporal mode; without a parallel form of its own a memory runs the step loop."""
        return self._loop(x, states, is_init)

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


def run_group(memories, xs, states, is_init, need_states: bool = True):
    """Several memories over the same [T, *B] steps and resets (a policy's actor and critic
    torsos): ``[m.run(x, s, is_init, time_dim=True, need_states) for ...]``, but memories that
    join (:meth:`Memory.joins`: the GRU on rltool's kernel) run in one loop in temporal mode."""
    first = memories[0]
    joins = getattr(first, "joins", None)  # a user's memory need not derive from Memory
    temporal = all(m.mode == "temporal" for m in memories)
    if len(memories) < 2 or not temporal or joins is None or not joins(memories):
        runs = zip(memories, xs, states, strict=True)
        return [m.run(x, s, is_init, True, need_states) for m, x, s in runs]
    T, lead = is_init.shape[0], xs[0].shape[1:-1]
    n = math.prod(lead)
    flat = [_flatten(s, lead, n) for s in states]
    outs = first._scan_group(
        memories,
        [x.reshape(T, n, -1) for x in xs],
        [f for f, _ in flat],
        is_init.reshape(T, n),
        need_states,
    )
    return [
        (y.reshape(T, *lead, -1), None if nxt is None else _unflatten(nxt, (T, *lead), shapes))
        for (y, nxt), (_, shapes) in zip(outs, flat, strict=True)
    ]


def _flatten(states, lead, n):
    """States [*lead, ...] -> [n, ...] each, and their trailing shapes."""
    shapes = [s.shape[len(lead) :] for s in states]
    return [s.reshape(n, *sh) for s, sh in zip(states, shapes, strict=True)], shapes


def _unflatten(states, lead, shapes):
    return tuple(s.reshape(*lead, *sh) for s, sh in zip(states, shapes, strict=True))


def _sequence(scan, x, states, is_init):
    """A sequence run on flat batches: x [T, *B, F], states [*B, ...], is_init [T, *B, 1] ->
    ``scan(x [T, n, F], states [n, ...], is_init [T, n])``'s y and states, unflattened."""
    T, lead = x.shape[0], x.shape[1:-1]
    n = math.prod(lead)
    flat, shapes = _flatten(states, lead, n)
    y, nxt = scan(x.reshape(T, n, -1), flat, is_init.reshape(T, n))
    nxt = None if nxt is None else _unflatten(nxt, (T, *lead), shapes)
    return y.reshape(T, *lead, -1), nxt
