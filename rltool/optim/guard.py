"""Optimizer steps that never apply a non-finite loss or gradient: the guard's decision."""

from __future__ import annotations

import logging

import torch

from rltool.errors import EXIT_DIVERGED, RunStopped

_log = logging.getLogger(__name__)


class NonFiniteGuard:
    """Decides whether an optimizer step may be taken: not when the loss or the gradient norm is
    inf/nan (the step is skipped and counted); ``max_in_a_row`` skips in a row stop the run (exit
    code 3). The step itself is ``rltool.train.gradient_step``."""

    def __init__(self, max_in_a_row: int = 10):
        self.max_in_a_row, self.in_a_row, self.skipped = max_in_a_row, 0, 0

    def allows(self, loss: torch.Tensor, grad_norm: torch.Tensor) -> bool:
        """True for a finite loss and gradient norm; otherwise counts a skipped step (and raises
        RunStopped after ``max_in_a_row`` in a row)."""
        finite_loss = bool(torch.isfinite(loss).all())
        if finite_loss and bool(torch.isfinite(grad_norm)):
            self.in_a_row = 0
            return True
        self.skipped += 1
        self.in_a_row += 1
        what = "loss" if not finite_loss else "gradient"
        if self.in_a_row == 1:
            _log.warning(f"rltool: skipped an optimizer step with a non-finite {what}")
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
