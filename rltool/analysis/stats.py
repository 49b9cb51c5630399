"""Interval estimates for reports (Agarwal et al. 2021, through ``rliable``: ``pip install
'rltool[stats]'``), POPGym's MMER and frames to a goal.

Estimates are over seeds (runs): the IQM and the mean of the final evaluations with 95%
stratified bootstrap confidence intervals (percentile method), and the probability of
improvement. ``rliable`` draws its resamples from numpy's global RNG whatever ``random_state``
says, so :func:`_seeded` fixes that RNG for the call (and puts it back): the same folders print
the same numbers. MMER and frames to goal read a run's files and need no ``rliable``.
"""

from __future__ import annotations

import contextlib
import csv
import math
import sys
from pathlib import Path

import numpy as np

from rltool.analysis.results import eval_curve
from rltool.errors import UserError
from rltool.runfolder.layout import RunFolder

MIN_SEEDS = 3  # fewer runs than this: no interval (a bootstrap of 1 or 2 values says nothing)
REPS = 2000  # bootstrap resamples: rliable's default for profiles; 50,000 takes ~5 s a row
SEED = 0
MMER_WINDOW = 100  # POPGym's MMER: the mean of the last 100 finished training episodes
POPGYM, MINIGRID = "popgym", "minigrid"


def iqm(xs) -> float:
    """The interquartile mean: the mean of the middle 50% (scipy's ``trim_mean(xs, 0.25)``,
    which rliable's ``aggregate_iqm`` is), nan for no values."""
    a = np.sort(np.asarray(xs, dtype=float).reshape(-1))
    if not a.size:
        return math.nan
    cut = int(0.25 * a.size)
    return float(a[cut : a.size - cut].mean())


def _rliable():
    try:
        from rliable import library, metrics
    except Exception as e:  # noqa: BLE001 - missing, or arch failing at import (pandas 3)
        raise UserError(
            f"statistics need rliable ({type(e).__name__}: {str(e).splitlines()[0][:80]}): "
            "pip install 'rltool[stats]'"
        ) from None
    # rliable imports absl, whose log handler keeps the sys.stderr of that moment and closes it
    # when logging is configured again (Hydra does, at every run): a replaced stderr (pytest's
    # capture, a caller's redirect) would be closed under its owner. The real one it never closes
    with contextlib.suppress(Exception):
        from absl import logging as absl_logging

        absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
    return library, metrics


@contextlib.contextmanager
def _seeded(seed: int):
    """numpy's global RNG seeded for the block, then as it was (rliable resamples with it)."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield np.random.RandomState(seed)
    finally:
        np.random.set_state(state)


def _quiet(fn):
    import warnings

    with warnings.catch_warnings():  # arch's deprecation of random_state, called by rliable
        warnings.simplefilter("ignore", FutureWarning)
        return fn()


def intervals(
    scores: np.ndarray, reps: int = REPS, seed: int = SEED
) -> dict[str, tuple[float, float, float]]:
    """``{"iqm": (point, low, high), "mean": (...)}`` of ``scores`` [runs, tasks] with 95%
    stratified bootstrap intervals (runs resampled within each task)."""
    library, metrics = _rliable()
    scores = np.asarray(scores, dtype=float)
    if scores.ndim == 1:
        scores = scores[:, None]

    def both(s):
        return np.array([metrics.aggregate_iqm(s), metrics.aggregate_mean(s)])

    with _seeded(seed) as rs:
        point, ci = _quiet(
            lambda: library.get_interval_estimates({"x": scores}, both, reps=reps, random_state=rs)
        )
    (p_iqm, p_mean), (lo, hi) = point["x"], ci["x"]
    return {"iqm": (p_iqm, lo[0], hi[0]), "mean": (p_mean, lo[1], hi[1])}


def improvement(
    x: np.ndarray, y: np.ndarray, reps: int = REPS, seed: int = SEED
) -> tuple[float, float, float]:
    """P(X > Y) (rliable's ``probability_of_improvement``: per task the chance that a run of X
    beats a run of Y, ties half, averaged over tasks) of [runs, tasks] scores, with its 95%
    interval (X and Y resampled apart, within each task)."""
    library, metrics = _rliable()
    x, y = (np.asarray(a, dtype=float) for a in (x, y))
    with _seeded(seed) as rs:
        point, ci = _quiet(
            lambda: library.get_interval_estimates(
                {"xy": (x, y)}, metrics.probability_of_improvement, reps=reps, random_state=rs
            )
        )
    lo, hi = np.asarray(ci["xy"]).reshape(2)
    return float(point["xy"]), float(lo), float(hi)


def profiles(
    scores: dict[str, np.ndarray], taus: np.ndarray, reps: int = REPS, seed: int = SEED
) -> tuple[dict, dict]:
    """rliable's performance profiles (the share of runs above each tau) with 95% bands."""
    library, _ = _rliable()
    with _seeded(seed):
        return _quiet(lambda: library.create_performance_profile(scores, taus, reps=reps))


def normalised(score: float | None, suite: str | None, success: float | None = None) -> float:
    """A score in [0, 1] across suites: POPGym's return as POPGym maps it (0.5 x + 0.5: its
    returns lie in [-1, 1]); MiniGrid's success rate as it is; nan for other envs."""
    if suite == POPGYM and score is not None:
        return 0.5 * float(score) + 0.5
    if suite == MINIGRID and success is not None:
        return float(success)
    return math.nan


def read_episodes(path: str | Path) -> list[tuple[float, float]]:
    """(frames, return) of each finished training episode in the episodes file ([] when there
    is none). A resumed run appended after rows its checkpoint did not keep: where the frames go
    back, the rows at or past the new frame count are dropped."""
    path = Path(path)
    if not path.is_file():
        return []
    out: list[tuple[float, float]] = []
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            try:
                frames, ret = float(row["frames"]), float(row["return"])
            except (KeyError, TypeError, ValueError):
                continue
            if out and frames < out[-1][0]:
                while out and out[-1][0] >= frames:
                    out.pop()
            out.append((frames, ret))
    return out


def mmer(episodes: list[tuple[float, float]], window: int = MMER_WINDOW) -> float:
    """POPGym's max-mean episodic return of one run: after each iteration (a frame count), the
    mean of the last ``window`` finished training episodes (fewer at the start); the max of
    those means over training. nan without episodes."""
    if not episodes:
        return math.nan
    returns = np.array([r for _, r in episodes])
    n = len(episodes)  # the end of each iteration: its last episode
    ends = [i + 1 for i in range(n) if i + 1 == n or episodes[i + 1][0] != episodes[i][0]]
    return float(max(returns[max(0, e - window) : e].mean() for e in ends))


def run_mmer(run) -> float:
    return mmer(read_episodes(RunFolder(run.path).episodes))


def frames_to_goal(run, goal: float, budget: float, metric: str = "eval/return_mean") -> float:
    """The frames of the run's first evaluation at or above ``goal``; ``budget`` (its
    total_frames) when none reaches it, so a seed that never gets there counts as the most it
    could have cost."""
    xs, ys = eval_curve(run, metric)
    hit = np.nonzero(ys >= goal)[0]
    return float(xs[hit[0]]) if hit.size else float(budget)
