"""rltool report stats=true / compare=[A,B], rltool plot profile=true and MMER, on fabricated run
folders (no training, but for the episodes file of one tiny run): rliable's estimates against
hand-computed ones, seeded intervals, the probability of improvement, MMER, frames to a goal,
and the bad input of each."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from rltool.analysis import stats
from rltool.analysis.results import find_runs, group_runs
from rltool.cli import main
from rltool.errors import EXIT_USAGE

# rltool[stats] (in the test extra): a missing rliable fails these tests, it never skips them;
# imported through rltool, which keeps absl's log handler off pytest's capture
stats._rliable()
REPS = "reps=300"


def make_run(path, policy, seed, evals, *, task="RepeatPreviousEasy", suite="popgym",
             budget=1000, episodes=None, success=None):  # fmt: skip
    """A finished run: ``evals`` are (frames, eval/return_mean) rows, the last one the final."""
    (path / ".hydra").mkdir(parents=True)
    (path / "config.yaml").write_text(
        f"seed: {seed}\ntotal_frames: {budget}\nenv:\n  id: {task}\n  suite: {suite}\n"
    )
    (path / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n"
        f"      env: {suite}\n      task: {task}\n      policy: {policy}\n"
    )
    overrides = [f"task={task}", f"policy={policy}", f"seed={seed}"]
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    final = evals[-1][1]
    summary = {"frames": budget, "wall_time_s": 1.0, "eval/return_mean": final}
    if success is not None:
        summary["eval/success_rate"] = success
    (path / "summary.json").write_text(json.dumps(summary))
    rows = "".join(f"{f},{r}\n" for f, r in evals)
    (path / "metrics.csv").write_text("frames,eval/return_mean\n" + rows)
    (path / "status.json").write_text(json.dumps({"status": "done"}))
    if episodes is not None:
        lines = "".join(f"{f},{r}\n" for f, r in episodes)
        (path / "episodes.csv").write_text("frames,return\n" + lines)


def sweep(root, finals: dict, **kw):
    """One run per (task, policy, seed): ``finals[task][policy]`` are the seeds' final evals."""
    n = 0
    for task, by_policy in finals.items():
        for policy, values in by_policy.items():
            for seed, v in enumerate(values):
                make_run(root / str(n), policy, seed, [(500, v / 2), (1000, v)], task=task, **kw)
                n += 1
    return root


# ---- estimators -------------------------------------------------------------------------------


def test_iqm_is_the_mean_of_the_middle_half():
    assert stats.iqm([1, 2, 3, 4, 5, 6, 7, 100]) == pytest.approx(np.mean([3, 4, 5, 6]))
    assert stats.iqm([0.5]) == 0.5 and math.isnan(stats.iqm([]))


def test_rliable_estimates_match_hand_computed_iqm_and_mean():
    scores = np.array([[0.1, 0.9], [0.2, 0.8], [0.3, 0.7], [0.4, 0.2]])  # 4 runs x 2 tasks
    est = stats.intervals(scores, reps=300)
    # IQM over all 8 values: drop the 2 lowest (0.1, 0.2) and the 2 highest (0.8, 0.9)
    assert est["iqm"][0] == pytest.approx(np.mean([0.2, 0.3, 0.4, 0.7]))
    assert est["iqm"][0] == pytest.approx(stats.iqm(scores))
    assert est["mean"][0] == pytest.approx(scores.mean())
    for point, lo, hi in est.values():
        assert lo <= point <= hi
    assert stats.intervals(scores, reps=300) == est  # seeded: the same numbers again
    state = np.random.get_state()[1].copy()
    stats.intervals(scores, reps=300)
    assert (np.random.get_state()[1] == state).all()  # the global RNG is left as it was


def test_probability_of_improvement_half_for_equals_one_for_a_dominating_set():
    x = np.array([[0.1], [0.5], [0.9]])
    p, lo, hi = stats.improvement(x, x, reps=300)
    assert p == pytest.approx(0.5) and lo <= 0.5 <= hi
    p, lo, hi = stats.improvement(x + 1.0, x, reps=300)
    assert (p, lo, hi) == (1.0, 1.0, 1.0)


def test_mmer_is_the_best_mean_of_the_last_100_episodes():
    # iteration at 100 frames: 50 episodes of 0; at 200: 100 of 1 (window: 100 ones -> 1.0);
    # at 300: 60 of -1 (window: 40 ones, 60 minus ones -> -0.2). The max: 1.0
    eps = [(100, 0.0)] * 50 + [(200, 1.0)] * 100 + [(300, -1.0)] * 60
    assert stats.mmer(eps) == 1.0
    # the first window holds what there is: 2 episodes of 0.5, then 150 of 0 -> 0.5
    assert stats.mmer([(10, 0.5), (10, 0.5)] + [(20, 0.0)] * 150) == 0.5
    # a window that straddles iterations: 30 of 0.9, then 100 of 0.0 ending at 20 and 30 frames
    eps = [(10, 0.9)] * 30 + [(20, 0.0)] * 70 + [(30, 0.0)] * 30
    assert stats.mmer(eps) == pytest.approx(0.9)  # after 10 frames; after 20: 27/100
    assert math.isnan(stats.mmer([]))


def test_a_resumed_runs_lost_episodes_are_dropped(tmp_path):
    path = tmp_path / "episodes.csv"
    path.write_text("frames,return\n100,1\n200,2\n300,3\n200,5\n300,6\n")  # resumed from 100
    assert stats.read_episodes(path) == [(100, 1), (200, 5), (300, 6)]


def test_frames_to_goal_counts_a_seed_that_never_reaches_it_as_the_budget(tmp_path):
    make_run(tmp_path / "a", "gru", 0, [(100, 0.1), (200, 0.6), (300, 0.9)])
    make_run(tmp_path / "b", "gru", 1, [(100, 0.1), (200, 0.2), (300, 0.3)], budget=1000)
    a, b = sorted(find_runs([str(tmp_path)]), key=lambda r: r.path.name)
    assert stats.frames_to_goal(a, 0.5, 1000) == 200
    assert stats.frames_to_goal(b, 0.5, 1000) == 1000


def test_the_training_loop_writes_each_finished_episode(tmp_path):
    import rltool

    cfg = rltool.compose("env=cartpole", "total_frames=1024", "logger.progress=none")
    rltool.fit(cfg, tmp_path / "run")
    episodes = stats.read_episodes(tmp_path / "run" / "episodes.csv")
    assert len(episodes) > 10  # CartPole's random-ish episodes are short
    frames = [f for f, _ in episodes]
    assert frames == sorted(frames) and frames[-1] <= 1024
    assert all(r >= 1 for _, r in episodes)  # CartPole: +1 a step
    assert math.isfinite(stats.mmer(episodes))


# ---- rltool report ----------------------------------------------------------------------------

FINALS = {
    "RepeatPreviousEasy": {"gru": [0.9, 0.8, 1.0, 0.7], "mlp": [-0.5, -0.4, -0.3, -0.45]},
    "CountRecallEasy": {"gru": [0.2, 0.4, 0.1, 0.3], "mlp": [-0.1, -0.3, -0.2, 0.0]},
}


def test_report_stats_prints_intervals_and_a_normalised_aggregate(tmp_path, capsys):
    root = sweep(tmp_path, FINALS)
    args = ["report", str(root), "by=task,policy", "stats=true", REPS]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert main(args) == 0
    assert capsys.readouterr().out == out  # the same folders, the same numbers
    lines = out.splitlines()
    assert "IQM [95% CI]" in lines[0] and "mean [95% CI]" in lines[0]
    gru = next(ln for ln in lines if ln.startswith("task=RepeatPreviousEasy policy=gru"))
    # IQM of 0.7, 0.8, 0.9, 1.0: 0.85; the mean: 0.85 too
    assert "0.85 [" in gru
    agg = next(ln for ln in lines if ln.startswith("normalised (2 tasks, 1k frames) policy=gru"))
    # normalised: 0.5 x + 0.5 of all 8 scores
    norm = 0.5 * np.array(FINALS["RepeatPreviousEasy"]["gru"] + FINALS["CountRecallEasy"]["gru"])
    assert f"{np.mean(norm + 0.5):.2f} [" in agg


def test_report_frames_to_goal_column(tmp_path, capsys):
    root = sweep(tmp_path, {"RepeatPreviousEasy": FINALS["RepeatPreviousEasy"]})
    assert main(["report", str(root), "by=policy", "stats=true", "goal=0.45", REPS]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "frames to 0.45 IQM [95% CI]" in lines[0]
    # gru's evals at 500 frames are half the final: 0.45, 0.4, 0.5, 0.35 -> 500, 1000, 500,
    # 1000; IQM: the mean of the middle two, 750
    gru = next(ln for ln in lines if ln.startswith("policy=gru"))
    assert "750 [500, 1,000]" in gru
    # mlp never gets there: every seed counts as the budget
    mlp = next(ln for ln in lines if ln.startswith("policy=mlp"))
    assert "1,000 [1,000, 1,000]" in mlp


def test_report_stats_over_one_seed_says_the_interval_needs_more(tmp_path, capsys):
    make_run(tmp_path / "0", "gru", 0, [(1000, 0.5)])
    assert main(["report", str(tmp_path), "stats=true"]) == 0
    out, err = capsys.readouterr()
    assert "0.50" in out  # the table still prints, the points without an interval
    notes = [ln for ln in err.splitlines() if "interval needs >= 3 seeds" in ln]
    assert len(notes) == 1


def test_compare_per_task_and_over_tasks(tmp_path, capsys):
    root = sweep(tmp_path, FINALS)
    assert main(["report", str(root), "by=task,policy", "compare=[gru,mlp]", REPS]) == 0
    out = capsys.readouterr().out.split("\n\n")[-1].splitlines()
    assert out[0].split()[:2] == ["task", "P(gru"]
    assert out[1].startswith("task=RepeatPreviousEasy") and " 1.00 " in out[1]
    assert out[-1].startswith("all 2 tasks (1k frames)") and "[1.00, 1.00]" in out[-1]
    # the same, spelt key:value, and the other way round: 0
    assert main(["report", str(root), "by=task,policy", "compare=[policy:mlp,policy:gru]"]) == 0
    assert " 0.00 " in capsys.readouterr().out.splitlines()[-1]


def test_compare_of_a_bool_setting_in_any_spelling(tmp_path, capsys):
    for n, (on, v) in enumerate([(True, 1.0)] * 3 + [(False, 0.0)] * 3):
        make_run(tmp_path / str(n), "lstm", n % 3, [(500, v / 2), (1000, v)])
        with (tmp_path / str(n) / "config.yaml").open("a") as f:
            f.write(f"loss:\n  refresh_states: {str(on).lower()}\n")
    by = "by=loss.refresh_states"
    for spec in (
        "[true,false]",
        "[True,FALSE]",
        "[loss.refresh_states:true,loss.refresh_states:False]",
        "['loss.refresh_states=TRUE','loss.refresh_states=false']",
    ):
        assert main(["report", str(tmp_path), by, f"compare={spec}", REPS]) == 0, spec
        assert " 1.00 " in capsys.readouterr().out.splitlines()[-1], spec


def test_settings_that_differ_in_how_the_env_runs_share_their_task(tmp_path, capsys):
    """env.num_envs is a setting (how the agent runs the env), env.id names the task."""
    for n, (envs, v) in enumerate([(16, 1.0)] * 3 + [(8, 0.0)] * 3):
        make_run(tmp_path / str(n), "lstm", n % 3, [(500, v / 2), (1000, v)])
        cfg = tmp_path / str(n) / "config.yaml"
        cfg.write_text(cfg.read_text().replace("env:\n", f"env:\n  num_envs: {envs}\n"))
    assert main(["report", str(tmp_path), "by=env.id,env.num_envs", "compare=[16,8]", REPS]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("env.id=RepeatPreviousEasy") and " 1.00 " in last


def test_compare_naming_a_setting_that_is_not_there(tmp_path, capsys):
    root = sweep(tmp_path, FINALS)
    assert main(["report", str(root), "by=task,policy", "compare=[lstm,mlp]"]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no setting is 'lstm'" in err[0]
    assert "policy=gru, policy=mlp" in err[0]


def test_compare_refuses_different_frame_budgets(tmp_path, capsys):
    for seed in range(3):
        make_run(tmp_path / f"a{seed}", "gru", seed, [(1000, 0.5)], budget=1000)
        make_run(tmp_path / f"b{seed}", "mlp", seed, [(2000, 0.1)], budget=2000)
    assert main(["report", str(tmp_path), "by=policy", "compare=[gru,mlp]"]) == EXIT_USAGE
    assert "a comparison needs one frame budget" in capsys.readouterr().err


def test_stats_label_a_setting_of_mixed_budgets(tmp_path, capsys):
    make_run(tmp_path / "a", "gru", 0, [(1000, 0.5)], budget=1000)
    make_run(tmp_path / "b", "gru", 1, [(2000, 0.6)], budget=2000)
    assert main(["report", str(tmp_path), "by=policy", "stats=true"]) == 0
    err = capsys.readouterr().err
    assert "runs of different frame budgets, no statistics for them" in err


def test_mmer_column_in_a_suite_report(tmp_path, capsys):
    eps = [(500, 0.2)] * 100 + [(1000, 0.6)] * 100
    for seed in range(2):
        make_run(tmp_path / str(seed), "gru", seed, [(1000, 0.5)], episodes=eps)
    table = __import__("rltool.analysis.tables", fromlist=["rows"]).rows(
        group_runs(find_runs([str(tmp_path)]), ["task", "policy"])
    )
    assert table[0]["mmer"] == pytest.approx(0.6)
    assert main(["report", str(tmp_path), "by=task,policy", "format=markdown"]) == 0
    out = capsys.readouterr().out
    assert "| MMER |" in out.splitlines()[0] and "| 0.60 @1k |" in out
    assert "MMER: POPGym's max-mean episodic return" in out


def test_bad_compare_and_reps_values(capsys, tmp_path):
    make_run(tmp_path / "0", "gru", 0, [(1000, 0.5)])
    assert main(["report", str(tmp_path), "compare=[gru]"]) == EXIT_USAGE
    assert "give two" in capsys.readouterr().err
    assert main(["report", str(tmp_path), "reps=10"]) == EXIT_USAGE


# ---- rltool plot profile=true -----------------------------------------------------------------


def test_plot_profile_writes_a_png(tmp_path, capsys):
    root = sweep(tmp_path / "runs", FINALS)
    out = tmp_path / "profile.png"
    args = ["plot", str(root), "by=task", "profile=true", f"out={out}", REPS]
    assert main(args) == 0
    assert out.stat().st_size > 5000
    assert "2 setting(s) over 2 task(s)" in capsys.readouterr().out
