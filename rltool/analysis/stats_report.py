"""The statistics of ``rltool report stats=true`` and ``compare=[A,B]`` (estimators in
:mod:`rltool.analysis.stats`): intervals on each setting's row, aggregates over normalised scores,
the
probability of improvement. Each function returns the lines to print on stderr (``notes``):
what was left out and why, never a silent mix of frame budgets."""

from __future__ import annotations

import math

import numpy as np

from rltool.analysis import stats
from rltool.analysis.results import Setting, finite
from rltool.analysis.tables import MINIGRID, NORMALISED, POPGYM, _budget, _is_task_key, short_frames
from rltool.errors import UserError

NAN3 = (math.nan, math.nan, math.nan)
STAT_KEYS = ("iqm", "mean", "to_goal")


def _put(row: dict, key: str, est: tuple[float, float, float]) -> None:
    row[key], row[f"{key}_lo"], row[f"{key}_hi"] = est


def _estimate(xs, reps: int, seed: int) -> dict[str, tuple]:
    """IQM and mean with intervals; the points alone under :data:`stats.MIN_SEEDS` values."""
    xs = finite(xs)
    if len(xs) >= stats.MIN_SEEDS:
        return stats.intervals(np.array(xs)[:, None], reps, seed)
    if not xs:
        return {"iqm": NAN3, "mean": NAN3}
    return {"iqm": (stats.iqm(xs), math.nan, math.nan), "mean": (float(np.mean(xs)), *NAN3[:2])}


def add_intervals(
    settings: list[Setting], table: list[dict], goal: float | None, reps: int, seed: int
) -> list[str]:
    """Adds ``iqm``, ``mean`` (and with ``goal`` ``to_goal``: frames to reach it) with their
    ``_lo`` / ``_hi`` to each row of ``table`` (one per setting, aggregates after them)."""
    few, mixed = [], []
    keys = STAT_KEYS if goal is not None else STAT_KEYS[:2]
    for row in table:
        for k in keys:
            _put(row, k, NAN3)
    for s, row in zip(settings, table, strict=False):
        if not math.isfinite(_budget(s.runs)):
            budgets = sorted({short_frames(float(r.value("total_frames") or math.nan))
                              for r in s.runs})  # fmt: skip
            mixed.append(f"{s.name!r} ({', '.join(budgets)})")
            continue
        est = _estimate([r.summary.get("eval/return_mean") for r in s.runs], reps, seed)
        _put(row, "iqm", est["iqm"])
        _put(row, "mean", est["mean"])
        if goal is not None:
            budget = _budget(s.runs)
            spent = [stats.frames_to_goal(r, goal, budget) for r in s.runs]
            _put(row, "to_goal", _estimate(spent, reps, seed)["iqm"])
        if len(finite(r.summary.get("eval/return_mean") for r in s.runs)) < stats.MIN_SEEDS:
            few.append(s.name)
    notes = []
    if few:
        notes.append(
            f"an interval needs >= {stats.MIN_SEEDS} seeds: {len(few)} setting(s) have fewer "
            f"({', '.join(map(repr, few[:3]))}{', ...' * (len(few) > 3)}): points only"
        )
    if mixed:
        notes.append(
            f"{'; '.join(mixed)}: runs of different frame budgets, no statistics for them: "
            "add total_frames to by="
        )
    return notes


def _rest(s: Setting) -> tuple:
    """A setting's values less its task keys: what a comparison or an aggregate is over."""
    return tuple((k, v) for k, v in s.values.items() if not _is_task_key(k))


def _task(s: Setting) -> tuple:
    return tuple((k, v) for k, v in s.values.items() if _is_task_key(k))


def _suite(s: Setting) -> str | None:
    suites = {r.value("env.suite") for r in s.runs}
    return suites.pop() if len(suites) == 1 else None


def _normalised(s: Setting) -> list[float]:
    suite = _suite(s)
    return finite(
        stats.normalised(
            r.summary.get("eval/return_mean"), suite, r.summary.get("eval/success_rate")
        )
        for r in s.runs
    )


def normalised_rows(
    settings: list[Setting], goal: float | None, reps: int, seed: int
) -> tuple[list[dict], list[str]]:
    """One row per group of two or more POPGym / MiniGrid settings that differ only in their
    task: IQM and mean over the tasks' normalised final scores ([runs, tasks], runs resampled
    within each task), named with the frame budgets it spans."""
    groups: dict[tuple, list[Setting]] = {}
    for s in settings:
        if _suite(s) in (POPGYM, MINIGRID):
            groups.setdefault(_rest(s), []).append(s)
    out, notes = [], []
    for rest, ss in groups.items():
        if len(ss) < 2:
            continue
        cols = [_normalised(s) for s in ss]
        budgets = sorted({_budget(s.runs) for s in ss})
        span = "/".join(map(short_frames, budgets))
        name = f"normalised ({len(ss)} tasks, {span} frames)" + "".join(
            f" {k}={v}" for k, v in rest
        )
        row = {
            "setting": name,
            "suite": NORMALISED,
            "seeds": sum(len(c) for c in cols),
            "frames": budgets[0] if len(budgets) == 1 else math.nan,
            "final_mean": float(np.mean([np.mean(c) for c in cols if c])),
            **dict.fromkeys(("final_min", "final_p10", "final_median", "final_max"), math.nan),
            "at_goal": None,
            "goal": goal,
            "success": math.nan,
            "best_mean": math.nan,
            "mmer": math.nan,
            "wall_time_s": math.nan,
            "status": "aggregate",
            "error": "",
        }
        for k in STAT_KEYS[: 3 if goal is not None else 2]:
            _put(row, k, NAN3)
        n = {len(c) for c in cols}
        if len(n) == 1 and min(n) >= stats.MIN_SEEDS:
            est = stats.intervals(np.array(cols).T, reps, seed)
            _put(row, "iqm", est["iqm"])
            _put(row, "mean", est["mean"])
        else:
            notes.append(
                f"{name}: no interval: every task needs the same number of seeds, >= "
                f"{stats.MIN_SEEDS} (they have {', '.join(str(len(c)) for c in cols)})"
            )
        out.append(row)
    return out, notes


def _matches(s: Setting, spec: str) -> bool:
    """``spec``: parts joined by ``/``, each ``key=value``, ``key:value`` or a bare value."""
    values = dict(_rest(s))
    for part in spec.split("/"):
        key, sep, value = part.replace(":", "=", 1).partition("=")
        if sep and _word(values.get(key.strip(), "")) != _word(value):
            return False
        if not sep and _word(part) not in map(_word, values.values()):
            return False
    return True


def _word(value: str) -> str:
    """A setting's value as compared: true / True / TRUE are one value, as in a config."""
    value = value.strip()
    return value.lower() if value.lower() in ("true", "false") else value


def _label(s: Setting) -> str:
    return " ".join(f"{k}={v}" for k, v in _rest(s)) or s.name


def compare(
    settings: list[Setting], a: str, b: str, reps: int, seed: int
) -> tuple[list[dict], list[str]]:
    """P(A > B) on each task that both have, over the final evaluations of their seeds, and over
    all those tasks together. UserError when A or B names no setting, names several on a task,
    or when A and B ran on different frame budgets."""
    tasks: dict[tuple, dict[str, Setting]] = {}
    for side, spec in (("A", a), ("B", b)):
        for s in settings:
            if not _matches(s, spec):
                continue
            slot = tasks.setdefault(_task(s), {})
            if side in slot:
                raise UserError(
                    f"compare: {spec!r} names both {slot[side].name!r} and {s.name!r}: "
                    "name one, e.g. policy=gru/loss.lr=0.001"
                )
            slot[side] = s
        if not any(side in t for t in tasks.values()):
            known = ", ".join(dict.fromkeys(_label(s) for s in settings))
            raise UserError(f"compare: no setting is {spec!r}; the settings are: {known}")
    both = [(t, p["A"], p["B"]) for t, p in tasks.items() if "A" in p and "B" in p]
    if not both:
        raise UserError(
            f"compare: {a!r} and {b!r} share no task (a task is named by the by= keys env, "
            "task and env.*, except env.num_envs and the env's other run settings)"
        )
    out, notes, xs, ys = [], [], [], []
    for task, sa, sb in both:
        ba, bb = _budget(sa.runs), _budget(sb.runs)
        if ba != bb:  # nan (a side's own runs differ) included
            raise UserError(
                f"compare: {sa.name!r} ran {short_frames(ba)} frames, {sb.name!r} "
                f"{short_frames(bb)}: a comparison needs one frame budget (add total_frames to by=)"
            )
        x, y = (finite(r.summary.get("eval/return_mean") for r in s.runs) for s in (sa, sb))
        xs.append(x)
        ys.append(y)
        name = " ".join(f"{k}={v}" for k, v in task) or "(one task)"
        out.append(_poi_row(name, [x], [y], ba, reps, seed, notes))
    if len(both) > 1:
        budgets = sorted({_budget(sa.runs) for _, sa, _ in both})
        name = f"all {len(both)} tasks ({'/'.join(map(short_frames, budgets))} frames)"
        out.append(_poi_row(name, xs, ys, math.nan, reps, seed, notes))
    return out, notes


def _poi_row(name, xs, ys, frames, reps, seed, notes) -> dict:
    row = {"task": name, "seeds_a": sum(map(len, xs)), "seeds_b": sum(map(len, ys))}
    row |= {"frames": frames, "p": math.nan, "p_lo": math.nan, "p_hi": math.nan}
    if not all(xs) or not all(ys):
        notes.append(f"compare, {name}: a side has no final evaluation")
        return row
    same = len({len(x) for x in xs}) == 1 and len({len(y) for y in ys}) == 1
    enough = min(map(len, xs + ys)) >= stats.MIN_SEEDS
    if same and enough:
        row["p"], row["p_lo"], row["p_hi"] = stats.improvement(
            np.array(xs).T, np.array(ys).T, reps, seed
        )
        return row
    # the point without resampling: rliable's estimator over the tasks' own seeds
    _, metrics = stats._rliable()
    per_task = [
        metrics.probability_of_improvement(np.array(x)[:, None], np.array(y)[:, None])
        for x, y in zip(xs, ys, strict=True)
    ]
    row["p"] = float(np.mean(per_task))
    why = f">= {stats.MIN_SEEDS} seeds a side" if not enough else "the same seeds on every task"
    notes.append(f"compare, {name}: no interval: it needs {why}")
    return row
