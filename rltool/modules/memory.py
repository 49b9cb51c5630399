"""The memory interface shared by the non-LSTM memories (minGRU, FFM, TrXL), and the registry that
builds a torso's memory from ``policy.kind``.

A memory carries per batch element one tensor per state key (``state_specs``: any shape). Its
``run(x, states, is_init, time_dim, need_states)`` is :meth:`RecurrentModule.run`'s contract:
one step (x [*B, F], states [*B, ...], is_init [*B, 1]) or a sequence (x [T, *B, F], states at
t=0 [*B, ...], is_init [T, *B, 1]) giving y [.., hidden_size] and the states after each step.
Subclasses implement two things on flat batches (n = prod(*B)):

- ``_step(x [n, F], states [n, ...], reset [n] bool)``: one step, starting from zeros where
  ``reset``; returns y [n, H] and the next states;
- ``_scan(x [T, n, F], states [n, ...], is_init [T, n] bool, need_states)``: the whole sequence
  at once, cut at every ``is_init``; returns y [T, n, H] and the states after each step
  ([T, n, ...]) or None.

Sequential mode of a sequence is a Python loop of ``_step``; temporal mode is ``_scan``.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from rltool.modules.recurrent import RecurrentModule, set_memory_interface


class Memory(nn.Module):
    """Base of the scan / attention memories: mode resolution, leading-dim flattening, the step
    loop and the TensorDict path (as :class:`RecurrentModule`)."""

    default_state_keys: tuple[str, ...]
    mode = RecurrentModule.mode
    forward = RecurrentModule.forward

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        in_keys=("embed",),
        out_keys=("features",),
        state_keys=None,
        default_mode: str = "sequential",
        force_sequential: bool = False,
    ):
        super().__init__()
        set_memory_interface(
            self,
            input_size,
            hidden_size,
            in_keys,
            out_keys,
            state_keys,
            default_mode,
            force_sequential,
        )

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
        x, is_init = x.reshape(T, n, -1), is_init.reshape(T, n)
        if self.mode == "sequential":
            y, nxt = self._loop(x, flat, is_init)
        else:
            y, nxt = self._scan(x, flat, is_init, need_states)
        y = y.reshape(T, *lead, -1)
        if nxt is not None:
            nxt = tuple(s.reshape(T, *lead, *sh) for s, sh in zip(nxt, shapes, strict=True))
        return y, nxt

    def _loop(self, x, states, is_init):
        ys, nxts = [], []
        for t in range(x.shape[0]):
            y, states = self._step(x[t], states, is_init[t])
            ys.append(y)
            nxts.append(states)
        return torch.stack(ys), tuple(torch.stack(s) for s in zip(*nxts, strict=True))

    def _step(self, x, states, reset):
        raise NotImplementedError

    def _scan(self, x, states, is_init, need_states):
        raise NotImplementedError
