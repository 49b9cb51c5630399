"""``rltool plot <dirs...> [--out PNG] [--metric M]``: eval return against frames, the mean over
seeds with a +- one std band, one line per setting (needs matplotlib: ``pip install
'rltool[plot]'``)."""

from __future__ import annotations

import sys
from pathlib import Path

from rltool.cli import ArgParser
from rltool.cli.report import warn_unreadable
from rltool.errors import UserError
from rltool.results import Setting, band, eval_curve, find_runs, group_runs


def plot_main(argv: list[str]) -> int:
    p = ArgParser(
        prog="rltool plot", description="Eval return vs frames, shaded over seeds -> PNG."
    )
    p.add_argument("dirs", nargs="+")
    p.add_argument("--out", help="PNG file (default: <first folder>/learning_curves.png)")
    p.add_argument("--metric", default="eval/return_mean")
    p.add_argument("--title", default=None)
    a = p.parse_args(argv)
    unreadable = []
    try:
        settings = group_runs(find_runs(a.dirs, unreadable))
    finally:
        warn_unreadable("plot", unreadable)
    out = Path(a.out) if a.out else Path(a.dirs[0]) / "learning_curves.png"
    warnings: list[str] = []
    n = plot(settings, out, a.metric, a.title or " ".join(a.dirs), warnings)
    for w in warnings:  # once the plot is written (a refused --out stays one line)
        print(f"rltool plot: warning: {w}", file=sys.stderr)
    print(f"rltool plot: {n} setting(s) -> {out}")
    return 0


MIN_POINTS = 3  # fewer eval points than this: a warning, and the training returns instead
TRAIN_METRIC = "train/return_mean"


def plot(
    settings: list[Setting], out: Path, metric: str, title: str, warnings: list[str] | None = None
) -> int:
    """Draws the settings into ``out``; returns how many were drawn. A setting with a run of
    fewer than :data:`MIN_POINTS` values of ``metric`` is drawn from its training returns (when
    those have enough), with a line appended to ``warnings``."""
    warnings = [] if warnings is None else warnings
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("rltool plot needs matplotlib: pip install 'rltool[plot]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    kinds = fig.canvas.get_supported_filetypes()
    if out.suffix and out.suffix[1:].lower() not in kinds:
        plt.close(fig)
        raise UserError(
            f"--out {out}: matplotlib cannot write {out.suffix} files: end the name with one of "
            f"{', '.join('.' + k for k in sorted(kinds))}"
        )
    drawn = 0
    for s in settings:
        name, curves = s.name, [eval_curve(r, metric) for r in s.runs]
        counts = [(r, len(c[0])) for r, c in zip(s.runs, curves, strict=True)]
        few = [(r, n) for r, n in counts if n < MIN_POINTS]
        if few:
            train = [eval_curve(r, TRAIN_METRIC) for r in s.runs]
            what = ", ".join(f"{r.path} has {n}" for r, n in few)
            fallback = metric != TRAIN_METRIC and all(len(c[0]) >= MIN_POINTS for c in train)
            warnings.append(
                f"{name}: fewer than {MIN_POINTS} {metric} points ({what}; eval.every_frames "
                "against total_frames)" + (f": drawing {TRAIN_METRIC} instead" if fallback else "")
            )
            if fallback:
                curves, name = train, f"{name} [{TRAIN_METRIC}]"
        x, mean, std = band(curves)
        if not len(x):
            continue
        seeds = sum(len(c[0]) > 0 for c in curves)
        marker = "o" if len(x) < 15 else None  # a few evals: show the points
        (line,) = ax.plot(
            x, mean, marker=marker, label=f"{name} ({seeds} seed{'s' * (seeds != 1)})"
        )
        ax.fill_between(x, mean - std, mean + std, color=line.get_color(), alpha=0.2)
        drawn += 1
    if not drawn:
        plt.close(fig)
        raise UserError(f"no {metric} values in the metrics.csv of these runs: nothing to plot")
    ax.set_xlabel("frames")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out)
    except OSError as e:
        raise UserError(f"--out {out}: cannot write it ({e}): give a writable path") from None
    finally:
        plt.close(fig)
    return drawn
