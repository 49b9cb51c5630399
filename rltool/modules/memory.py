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
        lead = x.shape[1:-1] if time_dim else x.shape[:-1]
        n = math.prod(lead)
        shapes = [s.shape[len(lead) :] for s in states]
        flat = [s.reshape(n, *sh) for s, sh in zip(states, shapes, strict=True)]
        if not time_dim:
            y, nxt = self._step(x.reshape(n, -1), flat, is_init.reshape(n))
            return y.reshape(*lead, -1), tuple(
                s.reshape(*lead, *sh) for s, sh in zip(nxt, shapes, strict=True)
            )
        T = x.shape[0]
        y, nxt = self._sequence(x.reshape(T, n, -1), flat, is_init.reshape(T, n), need_states)
        y = y.reshape(T, *lead, -1)
        if nxt is not None:
            nxt = tuple(s.reshape(T, *lead, *sh) for s, sh in zip(nxt, shapes, strict=True))
        return y, nxt

    # a sequence's episode cuts are data-dependent (the lanes' lengths): under torch.compile
    # (compile=true, rltool/compile.py) it runs eagerly between the graphs around it
    @torch.compiler.disable
    def _sequence(self, x, states, is_init, need_states):
        """x [T, n, F], states [n, ...], is_init [T, n] -> the step loop or the scan."""
        if self.mode == "sequential":
            return self._loop(x, states, is_init)
        return self._scan(x, states, is_init, need_states)

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
