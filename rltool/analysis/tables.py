"""The tables of ``rltool report``: a setting's row is a population (see
:mod:`rltool.analysis.results`
for how runs are found and grouped): the final evaluations of its seeds (mean, min, 10th
percentile, median, max; the count at or above a goal) and the best periodic evaluation of each
seed.

Suites (``env.suite``): POPGym settings get an aggregate row per policy (the mean over tasks of
their final means: POPGym's returns all lie in [-1, 1]); MiniGrid settings are reported apart as a
success rate (the share of final evaluation episodes with a positive return, ``eval/success_rate``),
and never enter an aggregate.
"""

from __future__ import annotations

import csv
import io
import math

import numpy as np

from rltool.analysis.results import RunInfo, Setting, finite
from rltool.analysis.stats import run_mmer


def population(xs: list[float], goal: float | None = None) -> dict[str, float]:
    """mean, min, p10 (numpy's linear interpolation), median, max of the finite ``xs``, and
    ``at_goal``: how many are >= ``goal`` (None without a goal)."""
    xs = finite(xs)
    if not xs:
        stats = dict.fromkeys(("mean", "min", "p10", "median", "max"), math.nan)
    else:
        a = np.asarray(xs)
        stats = {
            "mean": float(a.mean()),
            "min": float(a.min()),
            "p10": float(np.percentile(a, 10)),
            "median": float(np.median(a)),
            "max": float(a.max()),
        }
    return stats | {"at_goal": None if goal is None else sum(x >= goal for x in xs)}


def _budget(runs: list[RunInfo]) -> float:
    """The frame budget (total_frames) of the runs: one number, or nan when they differ."""
    budgets = {r.value("total_frames") for r in runs} - {None}
    return float(budgets.pop()) if len(budgets) == 1 else math.nan


POPGYM, MINIGRID = "popgym", "minigrid"
# keys that name the task, left out when POPGym settings are averaged over tasks: env, task and
# env.* but for those that say how the agent runs or sees the env, not which env it is
_TASK_KEYS = ("env", "task")
_RUN_ENV_KEYS = frozenset(
    f"env.{k}"
    for k in ("num_envs", "backend", "frame_stack", "normalize_obs", "normalize_obs_frames",
              "normalize_reward", "clip_obs", "check", "action_mask")
)  # fmt: skip
BEST_NOTE = (
    "best greedy eval: each seed's best periodic evaluation (greedy actions), averaged over "
    "seeds; not POPGym's MMER (the best mean return of sampled training episodes) and not "
    "comparable with POPGym's tables. success: the share of final evaluation episodes with a "
    "positive return (MiniGrid). POPGym mean: the mean over tasks of their final means."
)


def _suite(runs: list[RunInfo]) -> str | None:
    suites = {r.value("env.suite") for r in runs}
    return suites.pop() if len(suites) == 1 else None


def _mean(xs) -> float:
    xs = finite(xs)
    return float(np.mean(xs)) if xs else math.nan


def rows(settings: list[Setting], goal: float | None = None) -> list[dict]:
    """One dict per setting: seeds, budget, the final evals' population (``final_*``), the count
    at the goal, the mean over seeds of each seed's best evaluation, the success rate (MiniGrid),
    wall time and status; then the POPGym aggregates (:func:`popgym_means`)."""
    out = []
    for s in settings:
        final = population([r.summary.get("eval/return_mean") for r in s.runs], goal)
        counts: dict[str, int] = {}
        for r in s.runs:
            counts[r.status] = counts.get(r.status, 0) + 1
        errors = sorted({r.error for r in s.runs if r.error})
        suite = _suite(s.runs)
        success = [r.summary.get("eval/success_rate") for r in s.runs]
        out.append(
            {
                "setting": s.name,
                "suite": suite,
                "seeds": len(s.runs),
                "frames": _budget(s.runs),
                **{f"final_{k}": v for k, v in final.items() if k != "at_goal"},
                "at_goal": final["at_goal"],
                "goal": goal,
                "success": _mean(success) if suite == MINIGRID else math.nan,
                "best_mean": _mean(r.best_eval for r in s.runs),
                "mmer": _mean(run_mmer(r) for r in s.runs),  # over seeds, as POPGym's tables
                "wall_time_s": _mean(r.summary.get("wall_time_s") for r in s.runs),
                "status": ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
                "error": "; ".join(errors),
            }
        )
    return out + popgym_means(settings, out)


def _is_task_key(key: str) -> bool:
    return key in _TASK_KEYS or (key.startswith("env.") and key not in _RUN_ENV_KEYS)


def popgym_means(settings: list[Setting], table: list[dict]) -> list[dict]:
    """One row per group of two or more POPGym settings that differ only in their task (the
    ``env`` / ``task`` keys and ``env.*`` but ``_RUN_ENV_KEYS``; e.g. one per policy): the mean
    over tasks of their final means, of their best evaluations and of their MMER. MiniGrid and
    other suites never enter."""
    groups: dict[tuple, list[dict]] = {}
    for s, r in zip(settings, table, strict=False):
        if r["suite"] == POPGYM:
            rest = tuple((k, v) for k, v in s.values.items() if not _is_task_key(k))
            groups.setdefault(rest, []).append(r)
    out = []
    for rest, rs in groups.items():
        if len(rs) < 2:
            continue
        name = f"POPGym mean ({len(rs)} tasks)" + "".join(f" {k}={v}" for k, v in rest)
        nan = dict.fromkeys(("final_min", "final_p10", "final_median", "final_max"), math.nan)
        out.append(
            {
                "setting": name,
                "suite": POPGYM,
                "seeds": sum(r["seeds"] for r in rs),
                "frames": math.nan,
                "final_mean": _mean(r["final_mean"] for r in rs),
                **nan,
                "at_goal": None,
                "goal": rs[0]["goal"],
                "success": math.nan,
                "best_mean": _mean(r["best_mean"] for r in rs),
                "mmer": _mean(r["mmer"] for r in rs),
                "wall_time_s": math.nan,
                "status": "aggregate",
                "error": "",
            }
        )
    return out


def _fmt(x, spec: str) -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def short_frames(x: float) -> str:
    """120k, 1.5M: a frame budget in a label."""
    if not math.isfinite(x):
        return "?"
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if x >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.0f}"


def _ci(r: dict, key: str, spec: str) -> str:
    """``point [low, high]``; the point alone when there is no interval."""
    point, lo, hi = r.get(key), r.get(f"{key}_lo"), r.get(f"{key}_hi")
    if point is None or not math.isfinite(point):
        return "-"
    if lo is None or not math.isfinite(lo):
        return _fmt(point, spec)
    return f"{_fmt(point, spec)} [{_fmt(lo, spec)}, {_fmt(hi, spec)}]"


def _mmer_cell(r: dict, ret: str) -> str:
    """MMER at the budget it was reached within (POPGym's tables: 15M frames)."""
    if not math.isfinite(r.get("mmer", math.nan)):
        return "-"
    at = f" @{short_frames(r['frames'])}" if math.isfinite(r["frames"]) else ""
    return _fmt(r["mmer"], ret) + at


def _cells(r: dict, cols: dict) -> list[str]:
    ret = ".1f" if r["suite"] not in (POPGYM, MINIGRID) else ".2f"  # [-1, 1], [0, 1]
    if r["suite"] == NORMALISED:
        ret = ".2f"
    cells = [r["setting"], str(r["seeds"]), _fmt(r["frames"], ",.0f")]
    cells += [_fmt(r[f"final_{k}"], ret) for k in ("mean", "min", "p10", "median", "max")]
    if r["goal"] is not None:
        cells.append("-" if r["at_goal"] is None else f"{r['at_goal']}/{r['seeds']}")
    if cols["stats"]:
        cells += [_ci(r, "iqm", ret), _ci(r, "mean", ret)]
    if cols["to_goal"]:
        cells.append(_ci(r, "to_goal", ",.0f"))
    if cols["success"]:
        cells.append(_fmt(r["success"], ".2f"))
    if cols["mmer"]:
        cells.append(_mmer_cell(r, ret))
    cells += [_fmt(r["best_mean"], ret), _fmt(r["wall_time_s"], ".0f")]
    return [*cells, r["status"] + (f" ({r['error']})" if r["error"] else "")]


NORMALISED = "normalised"  # the suite of an aggregate row over normalised scores
MMER_NOTE = (
    " MMER: POPGym's max-mean episodic return (the best mean of the last 100 sampled training "
    "episodes), averaged over seeds, at the row's frame budget (POPGym's tables: 15M frames)."
)
STATS_NOTE = (
    " IQM, mean: over seeds, [95% stratified bootstrap interval] (rliable); normalised: POPGym "
    "0.5 x + 0.5, MiniGrid's success rate."
)


def format_table(table: list[dict], fmt: str = "table") -> str:
    """``table`` (aligned columns), ``markdown`` (with a note on the columns below it) or ``csv``
    (every field of :func:`rows`). A success column when a MiniGrid setting is there."""
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
        return buf.getvalue().rstrip("\n")
    suites = (POPGYM, MINIGRID)
    cols = {
        "success": any(r["suite"] == MINIGRID for r in table),
        "stats": "iqm" in table[0],
        "to_goal": "to_goal" in table[0],
        "mmer": any(r["suite"] in suites and math.isfinite(r.get("mmer", math.nan)) for r in table),
    }
    head = ["setting", "seeds", "frames", "final mean", "min", "p10", "median", "max"]
    if table[0]["goal"] is not None:
        head.append(f">= {table[0]['goal']:g}")
    head += ["IQM [95% CI]", "mean [95% CI]"] * cols["stats"]
    if cols["to_goal"]:
        head.append(f"frames to {table[0]['goal']:g} IQM [95% CI]")
    head += ["success"] * cols["success"] + ["MMER"] * cols["mmer"]
    head += ["best greedy eval", "wall s", "status"]
    body = [_cells(r, cols) for r in table]
    text = grid(head, body, fmt)
    note = BEST_NOTE + MMER_NOTE * cols["mmer"] + STATS_NOTE * cols["stats"]
    return f"{text}\n\n{note}" if fmt == "markdown" else text


def grid(head: list[str], body: list[list[str]], fmt: str = "table") -> str:
    """Rows of cells as aligned columns (``table``) or a markdown table (``markdown``)."""
    if fmt == "markdown":
        lines = [head, ["---"] * len(head), *body]
        return "\n".join(
            "| " + " | ".join(c.replace("|", "\\|") for c in ln) + " |" for ln in lines
        )
    widths = [max(len(ln[i]) for ln in [head, *body]) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(ln, widths, strict=True)).rstrip()
        for ln in [head, *body]
    )
