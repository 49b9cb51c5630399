"""The population objective: a statistic of the final evals of a trial's seeds.

The statistics are :func:`rltool.analysis.tables.population`'s (what ``rltool report`` shows):
``mean``,
``min``, ``p10``, ``median``, ``max``, or ``count@G``, the number of seeds whose final eval is at
least ``G`` (the report's "at goal" column with ``--goal G``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rltool.analysis.results import RunInfo
from rltool.analysis.tables import population
from rltool.errors import UserError

FINAL = "eval/return_mean"  # the final eval, in summary.json (and each eval row of metrics.csv)
STATS = ("mean", "min", "p10", "median", "max")
COUNT = "count"  # count@<goal>


@dataclass(frozen=True)
class Objective:
    stat: str = "mean"  # one of STATS, or COUNT
    goal: float | None = None  # COUNT only

    @classmethod
    def parse(cls, text: str) -> Objective:
        name, _, goal = text.partition("@")
        if name in STATS and not goal:
            return cls(name)
        if name == COUNT:
            try:
                return cls(COUNT, float(goal))
            except ValueError:
                pass
        raise UserError(
            f"objective={text!r} is invalid: choose one of {', '.join(STATS)} or count@<goal> "
            "(e.g. count@450)"
        )

    def __str__(self) -> str:
        return f"{COUNT}@{self.goal:g}" if self.stat == COUNT else self.stat

    def of(self, returns: list[float]) -> float:
        """The statistic of ``returns`` (non-finite ones left out, as the report does)."""
        stats = population(returns, self.goal)
        return float(stats["at_goal"] if self.stat == COUNT else stats[self.stat])

    def of_runs(self, runs: list[RunInfo]) -> float:
        return self.of([r.summary.get(FINAL) for r in runs])
