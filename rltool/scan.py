"""The linear recurrence x_t = a_t * x_{t-1} + b_t as a parallel scan (LSTM cell states, GAE)."""

from __future__ import annotations

import torch


def linear_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """x_t = a_t * x_{t-1} + b_t over dim 0 with x_{-1} = 0, in log2(T) steps (Hillis-Steele).

    Used for the LSTM cell states of a sequence and, time-reversed, for GAE."""
    d, n = 1, a.shape[0]
    while d < n:
        b = torch.cat([b[:d], a[d:] * b[:-d] + b[d:]])
        a = torch.cat([a[:d], a[d:] * a[:-d]])
        d *= 2
    return b
