"""rltool report's population columns, on hand-made run folders with known figures."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rltool.analysis.results import find_runs, group_runs
from rltool.analysis.tables import population, rows
from rltool.cli import main


def make_run(path, env, policy, seed, final, best=None, evals=None, frames=100_000):
    """A finished run folder: config.yaml, Hydra's choices, summary.json, metrics."""
    (path / ".hydra").mkdir(parents=True)
    (path / "config.yaml").write_text(
        f"seed: {seed}\ntotal_frames: {frames}\nloss:\n  gamma: 0.99\n"
    )
    (path / ".hydra" / "hydra.yaml").write_text(
        f"hydra:\n  runtime:\n    choices:\n      env: {env}\n      policy: {policy}\n"
    )
    (path / ".hydra" / "overrides.yaml").write_text(
        f"- env={env}\n- policy={policy}\n- seed={seed}\n"
    )
    summary = {"frames": frames, "wall_time_s": 10.0, "eval/return_mean": final}
    if best is not None:
        summary["best_eval/return_mean"] = best
    (path / "summary.json").write_text(json.dumps(summary))
    lines = ["frames,eval/return_mean"] + [f"{f},{v}" for f, v in (evals or [])]
    (path / "metrics.csv").write_text("\n".join(lines) + "\n")
    (path / "status.json").write_text(json.dumps({"status": "done"}))


def test_population_statistics_by_hand():
    got = population([500, 300, 480, 100, 450, float("nan")], goal=450)
    # sorted 100, 300, 450, 480, 500: p10 interpolates 100 + 0.4 * (300 - 100)
    assert got == {"mean": 366.0, "min": 100.0, "p10": 180.0, "median": 450.0, "max": 500.0,
                   "at_goal": 3}  # fmt: skip
    assert population([], goal=1.0)["at_goal"] == 0 and np.isnan(population([])["mean"])


def test_report_groups_two_sweep_folders_by_keys_with_goal_and_best(tmp_path, capsys):
    finals = {"lstm": [500.0, 490.0, 200.0], "gru": [450.0, 400.0, 500.0]}
    for policy, values in finals.items():
        for seed, final in enumerate(values):
            run = tmp_path / f"sweep_{policy}" / str(seed)
            # the gru runs predate best_eval in summary.json: read from their metrics
            best = None if policy == "gru" else final + 5
            evals = [(50_000, final + 7), (100_000, final)] if policy == "gru" else None
            make_run(run, "cartpole_pomdp", policy, 100 + seed, final, best, evals)
    runs = find_runs([str(tmp_path / "sweep_lstm"), str(tmp_path / "sweep_gru")])
    table = rows(group_runs(runs, by=["env", "policy"]), goal=450)
    assert [r["setting"] for r in table] == [
        "env=cartpole_pomdp policy=lstm",
        "env=cartpole_pomdp policy=gru",
    ]
    lstm, gru = table
    assert lstm["seeds"] == 3 and lstm["frames"] == 100_000
    assert lstm["final_min"] == 200 and lstm["final_median"] == 490 and lstm["at_goal"] == 2
    assert lstm["final_mean"] == pytest.approx(1190 / 3)
    assert lstm["best_mean"] == pytest.approx(1190 / 3 + 5)
    assert gru["at_goal"] == 2 and gru["best_mean"] == pytest.approx(1350 / 3 + 7)
    by_value = rows(group_runs(runs, by=["loss.gamma", "nothing.here"]))
    assert [r["setting"] for r in by_value] == ["loss.gamma=0.99 nothing.here=-"]
    assert by_value[0]["seeds"] == 6 and by_value[0]["at_goal"] is None

    args = ["report", str(tmp_path / "sweep_lstm"), str(tmp_path / "sweep_gru")]
    assert main([*args, "by=policy", "goal=450", "format=markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| setting | seeds | frames | final mean | min | p10 | median | max |")
    assert ">= 450" in out[0] and "best greedy eval" in out[0]
    assert out[2].startswith(
        "| policy=lstm | 3 | 100,000 | 396.7 | 200.0 | 258.0 | 490.0 | 500.0 | 2/3 |"
    )


def test_report_without_goal_has_no_goal_column(tmp_path, capsys):
    make_run(tmp_path / "r", "cartpole", "mlp", 0, 500.0, 500.0)
    assert main(["report", str(tmp_path / "r")]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert ">=" not in head and "final mean" in head
