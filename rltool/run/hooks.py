"""What a caller of ``rltool.train.train`` wants called at fixed points of its loop.

A ``Hooks`` is an argument of ``train()`` (no module-level registry): two runs in one process
each call only their own. ``rltool tune``'s pruner is one (``rltool.sweeps.tune.prune``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

EvalHook = Callable[[Path, dict], None]


@dataclass(frozen=True)
class Hooks:
    """Callbacks of one ``rltool.fit`` / ``rltool.resume`` call (no module-level registry).

    Two ``Hooks`` add up (``a + b`` calls both lists).

    Attributes:
        on_eval (list[Callable[[Path, dict], None]]): Each called as ``hook(run_dir, row)``
            after each periodic evaluation (not the final one), on the rank that evaluates;
            ``row`` is the evaluation's metrics row. A hook may raise to stop its run (the
            exception leaves the call, after the run is closed).

    Example:
        ```python
        hooks = rltool.Hooks(on_eval=[lambda run_dir, row: print(row["eval/return_mean"])])
        rltool.fit(cfg, "runs/lstm", hooks=hooks)
        ```
    """

    on_eval: list[EvalHook] = field(default_factory=list)

    def __add__(self, other: Hooks) -> Hooks:
        return Hooks(on_eval=[*self.on_eval, *other.on_eval])
