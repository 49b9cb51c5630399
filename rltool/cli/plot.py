"""``rltool plot <dirs...> [--out PNG] [--metric M]``: eval return against frames, the mean over
seeds with a +- one std band, one line per setting (needs matplotlib: ``pip install
'rltool[plot]'``)."""

from __future__ import annotations

from pathlib import Path

from rltool.cli import ArgParser
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
    settings = group_runs(find_runs(a.dirs))
    out = Path(a.out) if a.out else Path(a.dirs[0]) / "learning_curves.png"
    n = plot(settings, out, a.metric, a.title or " ".join(a.dirs))
    print(f"rltool plot: {n} setting(s) -> {out}")
    return 0


def plot(settings: list[Setting], out: Path, metric: str, title: str) -> int:
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
        x, mean, std = band([eval_curve(r, metric) for r in s.runs])
        if not len(x):
            continue
        seeds = sum(len(eval_curve(r, metric)[0]) > 0 for r in s.runs)
        marker = "o" if len(x) < 15 else None  # a few evals: show the points
        (line,) = ax.plot(
            x, mean, marker=marker, label=f"{s.name} ({seeds} seed{'s' * (seeds != 1)})"
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
