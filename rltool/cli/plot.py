"""``rltool plot <folders...> [out=PNG] [metric=M] [by=[k,...] [curves=[k,...]]]``: eval return
against frames, the mean over seeds with a +- one std band, one line per setting (needs
matplotlib: ``pip install 'rltool[plot]'``). With ``by=``, one panel per value of those keys
(``by=task``: one per task of the memory suite) and in each one curve per value of ``curves=``
(default ``policy``), the same colour for the same curve in every panel."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from rltool.analysis.plot import plot, plot_panels
from rltool.analysis.results import find_runs, group_runs
from rltool.cli.args import help_text, parse, wants_help
from rltool.cli.report import FOLDERS_HELP, warn_mixed, warn_unreadable
from rltool.console import STDOUT
from rltool.errors import UserError
from rltool.sweeps.tune.study import is_study

_log = logging.getLogger(__name__)


def _opt(default, help_: str, **more):
    return field(default=default, metadata={"help": help_, **more})


@dataclass
class PlotArgs:
    """rltool plot's options (``key=value``, parsed by :mod:`rltool.cli.args`)."""

    folders: list[str] = field(
        default_factory=list, metadata={"help": FOLDERS_HELP, "positional": True}
    )
    out: str | None = _opt(None, "the PNG file (null: <first folder>/learning_curves.png)")
    metric: str = _opt("eval/return_mean", "the metrics.csv column drawn against frames")
    title: str | None = _opt(None, "the figure's title (null: the folders)")
    by: list[str] | None = _opt(
        None,
        "one panel per value of these keys, by=task or by=[env,policy] (a config group takes "
        "the option each run chose, other keys their value; null: one panel)",
    )
    curves: list[str] = field(
        default_factory=lambda: ["policy"],
        metadata={"help": "with by=: one curve per value of these keys in each panel"},
    )
    profile: bool = _opt(
        False,
        "performance profiles (the share of runs above each score, rliable) and IQM / mean "
        "bars with 95% intervals of the final evals, instead of curves; with by=task one "
        "profile per curves= value over the tasks' normalised scores (needs rltool[stats]; "
        "null out=: <first folder>/profile.png)",
    )
    reps: int = _opt(2000, "with profile=true: bootstrap resamples (seeded)")

    def __post_init__(self):
        if not self.folders:
            raise UserError("rltool plot needs a folder: rltool plot <folder> ... [key=value]")


USAGE = "rltool plot <folder> [<folder> ...] [key=value ...]"
ABOUT = (
    "Eval return against frames, the mean over seeds with a +- one std band, one curve per "
    "setting -> PNG (a study folder of rltool tune: its history and importances)."
)


def plot_main(argv: list[str]) -> int:
    if wants_help(argv):
        print(help_text(PlotArgs, USAGE, ABOUT))
        return 0
    a = parse(PlotArgs, argv, "plot")
    if len(a.folders) == 1 and is_study(a.folders[0]):  # rltool tune's study folder
        from rltool.sweeps.tune.plot import plot_study

        out = plot_study(Path(a.folders[0]), Path(a.out) if a.out else None)
        _log.info(f"rltool plot: study history and importances -> {out}", extra=STDOUT)
        return 0
    unreadable = []
    try:
        runs = find_runs(a.folders, unreadable)
    finally:
        warn_unreadable("plot", unreadable)
    name = "profile.png" if a.profile else "learning_curves.png"
    out = Path(a.out) if a.out else Path(a.folders[0]) / name
    warnings: list[str] = []
    title = a.title or " ".join(a.folders)
    if a.profile:
        from rltool.analysis.profile import draw_profile

        what = draw_profile(runs, a.by, a.curves, out, title, a.reps)
    elif a.by:
        by_panel = group_runs(runs, a.by)
        warn_mixed("plot", by_panel)
        panels = [(s.name, group_runs(s.runs, a.curves or None)) for s in by_panel]
        n = plot_panels(panels, out, a.metric, title, warnings)
        what = f"{len(panels)} panel(s), {n} curve(s)"
    else:
        what = f"{plot(group_runs(runs), out, a.metric, title, warnings)} setting(s)"
    for w in warnings:  # once the plot is written (a refused out= stays one line)
        _log.warning(f"rltool plot: warning: {w}")
    _log.info(f"rltool plot: {what} -> {out}", extra=STDOUT)
    return 0
