"""Learning curves drawn with matplotlib (``rltool plot``'s figures; needs ``rltool[plot]``):
eval return against frames, the mean over seeds with a +- one std band, one curve per setting,
in one panel or one panel per value of ``by=``."""

from __future__ import annotations

from pathlib import Path

from rltool.analysis.results import Setting, band, eval_curve
from rltool.errors import UserError

MIN_POINTS = 3  # fewer eval points than this: a warning, and the training returns instead
TRAIN_METRIC = "train/return_mean"


def pyplot():
    """matplotlib's pyplot on the Agg backend (files only); a one-line UserError without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("rltool plot needs matplotlib: pip install 'rltool[plot]'") from None
    return plt


def check_out(plt, fig, out: Path) -> None:
    """Refuses (closing ``fig``) an ``out`` whose suffix matplotlib cannot write."""
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


def save(plt, fig, out: Path) -> None:
    """Writes ``fig`` to ``out`` (its folder made) and closes it; an OS refusal is one line."""
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
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=100)
    check_out(plt, fig, out)
    drawn = _draw(ax, settings, metric, warnings)
    if not drawn:
        plt.close(fig)
        raise UserError(f"no {metric} values in the metrics.csv of these runs: nothing to plot")
    ax.set_xlabel("frames")
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    save(plt, fig, out)
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
    plt = pyplot()
    cols = min(PANEL_COLUMNS, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), dpi=100, squeeze=False)
    check_out(plt, fig, out)
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
    save(plt, fig, out)
    return drawn
