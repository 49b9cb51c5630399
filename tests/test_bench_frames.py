"""scripts/bench_frames.py: frames to threshold on hand-made curves, the seed lists, and both
sides evaluated at the same frame counts (a tiny run of each; no timing)."""

from __future__ import annotations

import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import bench_frames  # noqa: E402


def test_frames_to_threshold_is_the_first_evaluation_at_or_above_it():
    curve = [(2560, 100.0), (5120, 475.0), (7680, 300.0), (10240, 500.0)]
    assert bench_frames.frames_to_threshold(curve, 475, 100_000) == 5120
    assert bench_frames.frames_to_threshold(curve, 480, 100_000) == 10240


def test_a_seed_that_never_reaches_it_counts_the_budget():
    curve = [(2560, 100.0), (100_096, 474.9)]  # the last rollout ends past the budget
    assert bench_frames.frames_to_threshold(curve, 475, 100_000) == 100_000
    assert bench_frames.frames_to_threshold([], 475, 100_000) == 100_000


def test_seed_lists():
    assert bench_frames.parse_seeds("100-103,110") == [100, 101, 102, 103, 110]
    assert bench_frames.parse_seeds("7") == [7]
    assert bench_frames.compact([100, 101, 102, 105, 107, 108]) == "100-102,105,107-108"


def test_the_summary_refuses_unaligned_evaluations():
    rows = {
        ("mlp", s, side): {"evals": [[f, 500.0], [1024, 500.0]], "fps": 1.0}
        for s in (1, 2, 3)
        for side, f in (("rltool", 512), ("sb3", 500))
    }
    with pytest.raises(SystemExit, match="different frame counts"):
        bench_frames.summary(rows, "mlp", [1, 2, 3], 475, 1024)


@pytest.mark.parametrize("case", ["mlp", "lstm"])
def test_both_sides_evaluate_at_the_same_frames(case):
    pytest.importorskip("sb3_contrib")
    rows = {side: bench_frames.run_one(case, 0, side, 1_200, 512) for side in bench_frames.SIDES}
    frames = [[f for f, _ in rows[side]["evals"]] for side in bench_frames.SIDES]
    assert frames[0] == frames[1] == [512, 1024, 1280]  # after those updates; the final


def test_an_override_switches_one_difference_on_rltools_side():
    import bench_ppo

    base = bench_ppo.rltool_config("mlp", 0, 1_000, 512)
    cfg = bench_ppo.rltool_config("mlp", 0, 1_000, 512, ("loss.value_coef=1.0",))
    assert (base.loss.value_coef, cfg.loss.value_coef) == (0.5, 1.0)
    assert cfg.optim == base.optim and cfg.env == base.env
