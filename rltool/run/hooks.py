"""What a caller of :func:`rltool.train.train` wants called at fixed points of its loop.

A :class:`Hooks` is an argument of ``train()`` (no module-level registry): two runs in one process
each call only their own. ``rltool tune``'s pruner is one (:mod:`rltool.sweeps.tune.prune`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EvalHook = Callable[[Path, dict], None]


@dataclass(frozen=True)
class Hooks:
    """The loop's hooks. ``on_eval``: called as ``hook(run_dir, row)`` after each periodic
    evaluation (not the final one), on the rank that evaluates; a hook may raise to stop its run
    (the exception leaves ``train()``, after the run is closed)."""

    on_eval: list[EvalHook] = field(default_factory=list)

    def __add__(self, other: Hooks) -> Hooks:
        return Hooks(on_eval=[*self.on_eval, *other.on_eval])
