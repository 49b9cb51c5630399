"""rltool report on a fabricated memory-suite sweep: per task and policy, POPGym's aggregate row
per policy (POPGym tasks only), MiniGrid's success rate apart, the markdown table's note on "best
greedy eval"; and eval/success_rate as the evaluation computes it."""

from __future__ import annotations

import json
import math

import pytest

from rltool.analysis.results import find_runs, group_runs
from rltool.analysis.tables import rows
from rltool.cli import main
from rltool.run.evaluation import summarize

# task -> suite, policy -> final evals of seeds 0, 1
FINALS = {
    ("RepeatPreviousEasy", "popgym"): {"gru": [1.0, 0.8], "mlp": [-0.5, -0.4]},
    ("CountRecallEasy", "popgym"): {"gru": [0.2, 0.4], "mlp": [-0.1, -0.3]},
    ("MemoryS7", "minigrid"): {"gru": [0.9, 0.5], "mlp": [0.3, 0.2]},
}
SUCCESS = {"gru": [1.0, 0.6], "mlp": [0.5, 0.3]}


def make_job(path, task, suite, policy, seed, final, success):
    (path / ".hydra").mkdir(parents=True)
    env = "popgym" if suite == "popgym" else "minigrid"
    (path / "config.yaml").write_text(
        f"seed: {seed}\ntotal_frames: 1000\nenv:\n  id: {task}\n  suite: {suite}\n"
    )
    (path / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n"
        f"      env: {env}\n      task: {task}\n      policy: {policy}\n"
    )
    overrides = [f"task={task}", f"policy={policy}", f"seed={seed}", "experiment=memory_suite"]
    (path / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    summary = {
        "frames": 1000,
        "wall_time_s": 5.0,
        "eval/return_mean": final,
        "eval/success_rate": success,
        "best_eval/return_mean": final + 0.1,
    }
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "metrics.csv").write_text(f"frames,eval/return_mean\n1000,{final}\n")
    (path / "status.json").write_text(json.dumps({"status": "done"}))


@pytest.fixture
def sweep(tmp_path):
    num = 0
    for (task, suite), by_policy in FINALS.items():
        for policy, finals in by_policy.items():
            for seed, final in enumerate(finals):
                make_job(
                    tmp_path / str(num), task, suite, policy, seed, final, SUCCESS[policy][seed]
                )
                num += 1
    return tmp_path


@pytest.mark.parametrize("by", [["task", "policy"], None])
def test_popgym_tasks_are_averaged_per_policy_and_minigrid_stays_apart(sweep, by):
    table = rows(group_runs(find_runs([str(sweep)]), by))
    assert len(table) == 6 + 2  # six settings, then one aggregate per policy
    named = {r["setting"]: r for r in table}
    gru_mean = named["POPGym mean (2 tasks) policy=gru"]
    assert gru_mean["final_mean"] == pytest.approx((0.9 + 0.3) / 2)  # MemoryS7 left out
    assert gru_mean["best_mean"] == pytest.approx((1.0 + 0.4) / 2)
    assert gru_mean["seeds"] == 4 and gru_mean["status"] == "aggregate"
    assert named["POPGym mean (2 tasks) policy=mlp"]["final_mean"] == pytest.approx(-0.325)
    minigrid = [r for r in table if r["suite"] == "minigrid"]
    assert [r["success"] for r in minigrid] == pytest.approx([0.8, 0.4])
    assert all(math.isnan(r["success"]) for r in table if r["suite"] != "minigrid")


def test_markdown_table_for_the_readme(sweep, capsys):
    assert main(["report", str(sweep), "by=task,policy", "format=markdown"]) == 0
    out = capsys.readouterr().out.splitlines()
    head = out[0]
    assert "| success | best greedy eval |" in head
    lines = {ln.split(" | ")[0]: ln for ln in out[2:] if ln.startswith("|")}
    assert lines["| task=RepeatPreviousEasy policy=gru"].startswith(
        "| task=RepeatPreviousEasy policy=gru | 2 | 1,000 | 0.90 | 0.80 | 0.82 | 0.90 | 1.00 | - |"
    )
    assert " | 0.80 | 0.80 | " in lines["| task=MemoryS7 policy=gru"]  # success, then best
    assert out[-4].startswith("| POPGym mean (2 tasks) policy=gru | 4 | - | 0.60 | - |")
    assert out[-3].startswith("| POPGym mean (2 tasks) policy=mlp | 4 | - | -0.33 | - |")
    assert out[-1].startswith("best greedy eval: each seed's best periodic evaluation")
    assert "not POPGym's MMER" in out[-1]


def test_a_sweep_without_minigrid_has_no_success_column(sweep, capsys):
    for num in range(8, 12):  # the MemoryS7 jobs
        for p in (sweep / str(num)).rglob("*"):
            if p.is_file():
                p.unlink()
    assert main(["report", str(sweep), "by=task,policy"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert "success" not in head and "best greedy eval" in head


def test_success_rate_is_the_share_of_positive_returns():
    got = summarize([0.9, 0.0, -1.0, 0.4], [10, 245, 245, 30])
    assert got["eval/success_rate"] == 0.5
    assert math.isnan(summarize([], [])["eval/success_rate"])


def test_plot_by_task_one_panel_per_task_one_curve_per_policy(sweep, capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    from rltool.analysis import plot as plotting

    for run in sweep.iterdir():  # four evaluations each, the seeds apart
        final = json.loads((run / "summary.json").read_text())["eval/return_mean"]
        points = [f"{f},{final * f / 4000}" for f in (1000, 2000, 3000, 4000)]
        (run / "metrics.csv").write_text("frames,eval/return_mean\n" + "\n".join(points) + "\n")
    figures = []
    save = plotting.save
    monkeypatch.setattr(
        plotting, "save", lambda plt, fig, out: figures.append(fig) or save(plt, fig, out)
    )
    out = sweep / "curves.png"
    assert main(["plot", str(sweep), "by=task", f"out={out}"]) == 0
    assert capsys.readouterr().out.strip() == f"rltool plot: 3 panel(s), 6 curve(s) -> {out}"
    assert out.stat().st_size > 1000
    axes = [ax for ax in figures[0].axes if ax.get_visible()]
    assert [ax.get_title() for ax in axes] == [
        "task=RepeatPreviousEasy",
        "task=CountRecallEasy",
        "task=MemoryS7",
    ]
    for ax in axes:
        labels = [line.get_label() for line in ax.lines]
        assert labels == ["policy=gru (2 seeds)", "policy=mlp (2 seeds)"]
        assert len(ax.collections) == 2  # the seeds' bands
    colors = {tuple(ax.lines[0].get_color()) for ax in axes}
    assert len(colors) == 1  # gru: one colour in every panel


def test_grouping_by_env_over_popgym_tasks_warns(sweep, capsys):
    assert main(["report", str(sweep), "by=env,policy"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "rltool report: warning: 'env=popgym policy=gru' mixes runs of 2 env.id values "
        "(CountRecallEasy, RepeatPreviousEasy): add task or env.id to by=",
        "rltool report: warning: 'env=popgym policy=mlp' mixes runs of 2 env.id values "
        "(CountRecallEasy, RepeatPreviousEasy): add task or env.id to by=",
    ]
    assert main(["report", str(sweep), "by=env.id,policy"]) == 0
    assert capsys.readouterr().err == ""
