"""The memory suite presets (conf/experiment/memory_suite*.yaml, conf/task/): the jobs each sweep
runs, each job's env and budget, composed without training; ``rltool train -m ... --cfg job``
lists them and runs nothing."""

from __future__ import annotations

from collections import Counter

import pytest
from conftest import make_cfg

from rltool.cli import main
from rltool.cli.sweep_plan import jobs, overrides_of

EASY = [
    "RepeatPreviousEasy",
    "RepeatFirstEasy",
    "CountRecallEasy",
    "PositionOnlyCartPoleEasy",
    "AutoencodeEasy",
    "MineSweeperEasy",
    "BattleshipEasy",
    "HigherLowerEasy",
]
MEDIUM = ["RepeatPreviousMedium", "CountRecallMedium", "PositionOnlyCartPoleMedium"]


def values(job: list[str]) -> dict[str, str]:
    return dict(o.split("=", 1) for o in job)


@pytest.mark.parametrize(
    ("preset", "tasks", "seeds"),
    [
        ("memory_suite", ["MemoryS7", *EASY], 3),
        ("memory_suite_medium", MEDIUM, 3),
        ("memory_suite_quick", ["MemoryS7", *EASY], 1),
    ],
)
def test_each_preset_runs_tasks_x_policies_x_seeds(preset, tasks, seeds):
    js = jobs([f"experiment={preset}"])
    assert len(js) == len(tasks) * 3 * seeds
    got = Counter((v["task"], v["policy"]) for v in map(values, js))
    assert got == {(t, p): seeds for t in tasks for p in ("lstm", "gru", "mlp")}
    assert values(js[0])["task"] == tasks[0]  # the longest jobs (MemoryS7) start first
    assert all(values(j)["experiment"] == preset for j in js)


def test_a_command_line_value_replaces_the_presets():
    js = jobs(["experiment=memory_suite", "seed=7", "policy=gru,mlp"])
    assert len(js) == 9 * 2 and {values(j)["seed"] for j in js} == {"7"}


def budget(*overrides):
    cfg = make_cfg(*overrides)
    return cfg.env.suite, cfg.env.id, cfg.total_frames


@pytest.mark.parametrize("task", ["MemoryS7", *EASY, *MEDIUM])
def test_every_policy_gets_the_tasks_env_and_budget(task):
    suite = "minigrid" if task == "MemoryS7" else "popgym"
    got = {
        budget("experiment=memory_suite", f"task={task}", f"policy={p}") for p in ("lstm", "mlp")
    }
    assert len(got) == 1  # mlp: the same budget as the memory policies
    ((s, env_id, frames),) = got
    assert (s, env_id) == (suite, task) and frames == make_cfg(f"task={task}").total_frames
    mlp = make_cfg("experiment=memory_suite", f"task={task}", "policy=mlp")
    lstm = make_cfg("experiment=memory_suite", f"task={task}", "policy=lstm")
    assert (mlp.loss, mlp.optim, mlp.collector) == (lstm.loss, lstm.optim, lstm.collector)
    assert mlp.policy.inputs == lstm.policy.inputs  # POPGym: the previous action for both


def test_budgets():
    assert budget("task=MemoryS7")[2] == 300_000
    assert {budget(f"task={t}")[2] for t in EASY} == {120_000}
    assert {budget(f"task={t}")[2] for t in MEDIUM} == {1_000_000}
    quick = {budget("experiment=memory_suite_quick", f"task={t}")[2] for t in ["MemoryS7", *EASY]}
    assert quick == {60_000}  # the quick preset replaces every task's budget


def test_the_flags_are_not_overrides():
    args = ["-m", "experiment=memory_suite", "--cfg", "job", "--resolve", "hydra/launcher=joblib"]
    assert overrides_of(args) == ["experiment=memory_suite", "hydra/launcher=joblib"]


def test_cfg_with_a_sweep_lists_its_jobs_and_runs_none(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["-m", "experiment=memory_suite_quick", "task=RepeatFirstEasy,MemoryS7"]
    assert main(["train", *args, "--cfg", "job"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "rltool train: 6 job(s), none run (--cfg)"
    assert out[0].startswith("job 0: task=RepeatFirstEasy policy=lstm seed=0")
    assert out[0].endswith("-> env.id=RepeatFirstEasy policy=lstm seed=0 total_frames=60000")
    assert "env.id=MemoryS7 policy=mlp" in out[5]
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_job_that_would_be_refused_is_refused_by_the_plan(capsys):
    args = ["-m", "experiment=memory_suite_quick", "seed=0", "total_frames=-1"]
    assert main(["train", *args, "--cfg", "job"]) == 2
    assert "total_frames=-1 is invalid" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("task", "suite", "env_id", "kwargs", "frames"),
    [
        ("RepeatFirstMedium", "popgym", "RepeatFirstMedium", {}, 2_000_000),
        ("MemoryS13", "minigrid", "MemoryS13", {}, 1_000_000),
        ("TMaze100", "gym", "rltool.envs.tmaze:TMaze-v0", {"length": 100}, 1_000_000),
        ("TMaze500", "gym", "rltool.envs.tmaze:TMaze-v0", {"length": 500}, 2_000_000),
    ],
)
def test_the_long_dependency_tasks(task, suite, env_id, kwargs, frames):
    """Issue #53's tasks, outside every preset: each its env, corridor and budget."""
    cfg = make_cfg(f"task={task}", "policy=gru")
    assert (cfg.env.suite, cfg.env.id, dict(cfg.env.kwargs)) == (suite, env_id, kwargs)
    assert cfg.total_frames == frames
