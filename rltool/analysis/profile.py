"""``rltool plot <folders> profile=true``'s figure: rliable's performance profiles (the share of
runs whose final score is above each tau, with 95% bands) and interval-estimate bars (IQM and
mean with 95% stratified bootstrap intervals) of the settings, one PNG. With ``by=`` (the tasks)
one profile per value of ``curves=`` over every task, on normalised scores (POPGym 0.5 x + 0.5,
MiniGrid's success rate); without it, one per setting on the final returns of one task."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rltool.analysis import stats
from rltool.analysis.results import RunInfo, group_runs
from rltool.analysis.tables import _budget, short_frames
from rltool.errors import UserError


def _score(r: RunInfo, normalise: bool) -> float:
    ret = r.summary.get("eval/return_mean")
    if not normalise:
        return float("nan") if ret is None else float(ret)
    return stats.normalised(ret, r.value("env.suite"), r.summary.get("eval/success_rate"))


def score_matrices(
    runs: list[RunInfo], by: list[str] | None, curves: list[str]
) -> tuple[dict[str, np.ndarray], str, str]:
    """({setting: [runs, tasks] scores}, the axis label, the budgets): UserError where the tasks
    have no common scale, a setting has unequal seeds over its tasks, or a task mixes budgets."""
    settings = group_runs(runs, curves) if by else group_runs(runs)
    tasks = group_runs(runs, by) if by else [None]
    suites = {r.value("env.suite") for r in runs}
    normalise = len(tasks) > 1
    if normalise and not suites <= {stats.POPGYM, stats.MINIGRID}:
        raise UserError(
            "profile=true over several tasks needs normalised scores (POPGym, MiniGrid runs); "
            "other envs: one task at a time"
        )
    budgets = []
    for t in tasks:
        b = _budget(t.runs if t else runs)
        if not np.isfinite(b):
            where = f"task {t.name!r}" if t else "these runs"
            raise UserError(
                f"profile=true: {where} mixes frame budgets: one budget per task "
                "(give the folders of one budget, or by=[task,total_frames])"
            )
        budgets.append(b)
    out = {}
    for s in settings:
        cols = []
        for t in tasks:
            inside = [r for r in s.runs if t is None or r in t.runs]
            cols.append([x for x in (_score(r, normalise) for r in inside) if np.isfinite(x)])
        cols = [c for c in cols if c]
        if len({len(c) for c in cols}) != 1:
            raise UserError(
                f"profile=true: {s.name!r} has {', '.join(str(len(c)) for c in cols)} seeds on "
                "its tasks: each task needs the same number"
            )
        out[s.name] = np.array(cols).T
    label = "normalised score" if normalise else "final eval/return_mean"
    return out, label, "/".join(short_frames(b) for b in sorted(set(budgets)))


def draw_profile(runs, by, curves, out: Path, title: str, reps: int) -> str:
    """Draws the profile and the interval bars (:func:`profile_figure`) into ``out``; returns
    what it holds."""
    from rltool.analysis.plot import check_out, pyplot, save

    plt = pyplot()
    fig, what = profile_figure(plt, runs, by, curves, title, reps)
    check_out(plt, fig, out)
    save(plt, fig, out)
    return what


def profile_figure(plt, runs, by, curves, title: str, reps: int):
    """The figure of the profile and the interval bars, and what it holds (saved by the
    caller)."""
    scores, label, budget = score_matrices(runs, by, curves)
    few = [n for n, m in scores.items() if m.shape[0] < stats.MIN_SEEDS]
    if few:
        raise UserError(
            f"profile=true: an interval needs >= {stats.MIN_SEEDS} seeds; "
            f"{', '.join(map(repr, few))} have fewer"
        )
    every = np.concatenate([m.reshape(-1) for m in scores.values()])
    taus = np.linspace(every.min(), every.max(), 101)
    dist, bands = stats.profiles(scores, taus, reps)
    est = {n: stats.intervals(m, reps) for n, m in scores.items()}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
    names = list(scores)
    for n in names:
        (line,) = left.plot(taus, dist[n], label=f"{n} ({scores[n].shape[0]} seeds)")
        left.fill_between(taus, bands[n][0], bands[n][1], color=line.get_color(), alpha=0.2)
    left.set_xlabel(f"{label} (tau)")
    left.set_ylabel("fraction of runs with score > tau")
    left.legend(fontsize=8)
    left.grid(alpha=0.3)
    y = np.arange(len(names))
    for k, (what, shift) in enumerate((("iqm", -0.18), ("mean", 0.18))):
        points = np.array([est[n][what][0] for n in names])
        lo = points - np.array([est[n][what][1] for n in names])
        hi = np.array([est[n][what][2] for n in names]) - points
        right.barh(y + shift, points, height=0.34, xerr=[lo, hi], capsize=3, color=f"C{k}",
                   alpha=0.7, label=what.upper() if what == "iqm" else what)  # fmt: skip
    right.set_yticks(y, names, fontsize=8)
    right.set_xlabel(f"{label}, 95% stratified bootstrap CI")
    right.legend(fontsize=8)
    right.grid(alpha=0.3, axis="x")
    fig.suptitle(f"{title} ({budget} frames)", fontsize=10)
    return fig, f"{len(names)} setting(s) over {scores[names[0]].shape[1]} task(s)"
