"""``rltool plot <folders...> [out=PNG] [metric=M] [by=[k,...] [curves=[k,...]]]``: eval return
against frames, the mean over seeds with a +- one std band, one line per setting (needs
matplotlib: ``pip install 'rltool[plot]'``). With ``by=``, one panel per value of those keys
(``by=task``: one per task of the memory suite) and in each one curve per value of ``curves=``
(default ``policy``), the same colour for the same curve in every panel."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from rltool.analysis.results import Setting, band, eval_curve, find_runs, group_runs
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
        from rltool.cli.tune_plot import plot_study

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
        from rltool.cli.profile import plot_profile

        plt = _pyplot()
        fig, what = plot_profile(plt, runs, a.by, a.curves, out, title, a.reps)
        _check_out(plt, fig, out)
        _save(plt, fig, out)
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


MIN_POINTS = 3  # fewer eval points than this: a warning, and the training returns instead
TRAIN_METRIC = "train/return_mean"


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("rltool plot needs matplotlib: pip install 'rltool[plot]'") from None
    return plt


def _check_out(plt, fig, out: Path) -> None:
    kinds = fig.canvas.get_supported_filetypes()
    if out.suffix and out.suffix[1:].lower() not in kinds:
        plt.close(fig)
        raise UserError(
            f"out={out}: matplotlib cannot write {out.suffix} files: end the name with one of "
            f"{', '.join('.' + k for k in sorted(kinds))}"
        )


def _draw(ax, settings: list[Setting], metric: str, warnings: list[str], colors=None) -> int:
    """The settings' curves on ``ax`` (see :func:`plot`); ``colors`` maps a curve's name to its
    colour, filled as new names come (the same policy, the same colour in every panel)."""
    drawn = 0
    for s in settings:
        name, curves = s.name, [eval_curve(r, metric) for r in s.runs]
        counts = [(r, len(c[0])) for r, c in zip(s.runs, curves, strict=True)]
        few = [(r, n) for r, n in counts if n < MIN_POINTS]
        label = s.name
        if few:
            train = [eval_curve(r, TRAIN_METRIC) for r in s.runs]
            what = ", ".join(f"{r.path} has {n}" for r, n in few)
            fallback = metric != TRAIN_METRIC and all(len(c[0]) >= MIN_POINTS for c in train)
            warnings.append(
                f"{name}: fewer than {MIN_POINTS} {metric} points ({what}; eval.every_frames "
                "against total_frames)" + (f": drawing {TRAIN_METRIC} instead" if fallback else "")
            )
            if fallback:
                curves, label = train, f"{name} [{TRAIN_METRIC}]"
        x, mean, std = band(curves)
        if not len(x):
            continue
        seeds = sum(len(c[0]) > 0 for c in curves)
        marker = "o" if len(x) < 15 else None  # a few evals: show the points
        color = None if colors is None else colors.get(s.name)
        (line,) = ax.plot(
            x,
            mean,
            marker=marker,
            color=color,
            label=f"{label} ({seeds} seed{'s' * (seeds != 1)})",
        )
        if colors is not None:
            colors.setdefault(s.name, line.get_color())
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        drawn += 1
    ax.grid(alpha=0.3)
    return drawn


def _save(plt, fig, out: Path) -> None:
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out)
    except OSError as e:
        raise UserError(f"out={out}: cannot write it ({e}): give a writable path") from None
    finally:
        plt.close(fig)


def plot(
    settings: list[Setting], out: Path, metric: str, title: str, warnings: list[str] | None = None
) -> int:
    """Draws the settings into ``out``; returns how many were drawn. A setting with a run of
    fewer than :data:`MIN_POINTS` values of ``metric`` is drawn from its training returns (when
    those have enough), with a line appended to ``warnings``."""
    warnings = [] if warnings is None else warnings
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    _check_out(plt, fig, out)
    drawn = _draw(ax, settings, metric, warnings)
    if not drawn:
        plt.close(fig)
        raise UserError(f"no {metric} values in the metrics.csv of these runs: nothing to plot")
    ax.set_xlabel("frames")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    _save(plt, fig, out)
    return drawn


PANEL_COLUMNS = 3


def plot_panels(
    panels: list[tuple[str, list[Setting]]],
    out: Path,
    metric: str,
    title: str,
    warnings: list[str] | None = None,
) -> int:
    """One panel per (name, settings), :data:`PANEL_COLUMNS` to a row, each setting a curve with
    its seeds shaded, a curve's colour the same in every panel; returns how many were drawn."""
    warnings = [] if warnings is None else warnings
    plt = _pyplot()
    cols = min(PANEL_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), dpi=100, squeeze=False)
    _check_out(plt, fig, out)
    colors: dict[str, str] = {}
    drawn = 0
    for ax, (name, settings) in zip(axes.flat, panels, strict=False):
        drawn += _draw(ax, settings, metric, warnings, colors)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("frames", fontsize=8)
        ax.set_ylabel(metric, fontsize=8)
        ax.tick_params(labelsize=7)
        if ax.lines:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    if not drawn:
        plt.close(fig)
        raise UserError(f"no {metric} values in the metrics.csv of these runs: nothing to plot")
    fig.suptitle(title, fontsize=10)
    _save(plt, fig, out)
    return drawn
