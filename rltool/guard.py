"""Optimizer steps that never apply a non-finite loss or gradient."""

from __future__ import annotations

import sys

import torch

from rltool.errors import EXIT_DIVERGED, RunStopped


class NonFiniteGuard:
    """``step`` = zero_grad, backward, clip, step — skipped (and counted) when the loss or the
    gradient norm is inf/nan; ``max_in_a_row`` skips in a row stop the run (exit code 3)."""

    def __init__(self, max_in_a_row: int = 10):
        self.max_in_a_row, self.in_a_row, self.skipped = max_in_a_row, 0, 0

    def step(self, optimizer, loss: torch.Tensor, params, max_grad_norm: float | None) -> bool:
        params = list(params)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if max_grad_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if bool(torch.isfinite(loss).all()) and bool(torch.isfinite(norm)):
            optimizer.step()
            self.in_a_row = 0
            return True
        optimizer.zero_grad(set_to_none=True)
        self.skipped += 1
        self.in_a_row += 1
        what = "loss" if not bool(torch.isfinite(loss).all()) else "gradient"
        if self.in_a_row == 1:
            print(f"rltool: skipped an optimizer step with a non-finite {what}", file=sys.stderr)
        if self.in_a_row >= self.max_in_a_row:
            raise RunStopped(
                f"stopped: {self.in_a_row} optimizer steps in a row had a non-finite {what}; the "
                "last good checkpoint is kept: lower optim.lr, set optim.max_grad_norm, or look "
                "for inf/nan in the env's observations and rewards",
                EXIT_DIVERGED,
            )
        return False

    def take_skipped(self) -> int:
        """Steps skipped since the last call (logged as ``nonfinite_steps``)."""
        n, self.skipped = self.skipped, 0
        return n

    def state_dict(self) -> dict:
        return {"in_a_row": self.in_a_row, "skipped": self.skipped}

    def load_state_dict(self, state: dict) -> None:
        self.in_a_row, self.skipped = state["in_a_row"], state["skipped"]
