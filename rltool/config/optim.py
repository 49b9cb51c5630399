"""The ``optim`` group's schema: Adam and the guard against non-finite steps."""

from __future__ import annotations

from dataclasses import dataclass

from rltool.config.fields import check_fields, ranged


@dataclass
class OptimConfig:
    lr: float = ranged(1e-3, gt=0)  # Adam's learning rate
    eps: float = ranged(1e-5, gt=0)  # Adam's epsilon
    anneal_lr: bool = True  # linear decay to 0 over total_frames
    # clip the gradient's global norm; null: no clipping
    max_grad_norm: float | None = ranged(0.5, gt=0, null=True)
    # steps with a non-finite loss or gradient are skipped; this many in a row stop the run
    max_nonfinite_steps: int = ranged(10, ge=1)
    # Adam's fused kernel (CPU, CUDA; elsewhere foreach): faster steps, the same algorithm with
    # different last-bit rounding, so a seed's run differs from the published tables' (measured
    # without it; docs/benchmarks/images-and-kernel-floor.md)
    fused: bool = False

    def __post_init__(self):
        check_fields(self, "optim")
