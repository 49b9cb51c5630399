"""rltool tune on a tiny env whose return is a quadratic of ``env.kwargs.x`` (tests/fake_envs.py,
QuadraticEnv: optimum at x = 0.3, a noise per seed): the search finds the optimum, the population
objective is the report's statistic, pruning, a killed study resumed to exactly N trials, the
study lock, confirm / export, and bad input (one line, nothing written)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import optuna  # CI installs the tune extra: a missing optuna fails here, never skips
import pytest
from conftest import CLI_PYTHONPATH, make_cfg, start_cli
from fake_envs import QuadraticEnv
from omegaconf import OmegaConf

from rltool.analysis.results import find_runs, group_runs
from rltool.analysis.tables import rows
from rltool.cli import main
from rltool.sweeps.tune import results
from rltool.sweeps.tune import space as sp
from rltool.sweeps.tune import study as st

KEY = "env.kwargs.x"
# 2 updates of 32 frames: a periodic evaluation at 32 (reported to the pruner), the final at 64
TINY = [
    "env=gym",
    "env.id=fake_envs:FakeQuadratic-v0",
    "env.num_envs=2",
    "collector.frames_per_batch=32",
    "total_frames=64",
    "eval.every_frames=32",
    "eval.episodes=2",
    "eval.final_episodes=2",
    "loss.epochs=1",
    "logger.progress=none",
]


def space_file(tmp_path: Path, body: str, name: str = "space.yaml") -> str:
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def float_space(tmp_path: Path, low=-1.0, high=1.5) -> str:
    return space_file(tmp_path, f"params:\n  {KEY}: {{type: float, low: {low}, high: {high}}}\n")


def load(study: Path):
    return optuna.load_study(study_name=st.STUDY_NAME, storage=st.storage(study))


def finals(folder: Path) -> list[float]:
    return [
        json.loads((d / "summary.json").read_text())["eval/return_mean"]
        for d in sorted(folder.iterdir(), key=lambda p: p.name)
        if (d / "summary.json").exists()
    ]


def killable(tmp_path: Path, study: Path, frames: int, every: int, *more: str) -> list[str]:
    """Arguments of a study of 3 trials long enough to be stopped mid-trial (checkpoints every
    256 frames, an evaluation every ``every``)."""
    longer = [a for a in TINY if not a.startswith(("total_frames", "eval.every"))]
    args = ["tune", *longer, f"total_frames={frames}", f"eval.every_frames={every}"]
    args += ["checkpoint.every_frames=256", f"search={float_space(tmp_path)}", "trials=3"]
    return [*args, *more, "pruner=none", f"study={study}"]


def assert_each_trial_ran_once(study: Path, trials, seeds: int) -> None:
    """Each trial ran once, on its own values (its jobs' overrides say so), and its value is
    the mean of its jobs' final evals."""
    for t in trials:
        for k in range(seeds):
            job = st.trial_dir(study, t.number) / str(k)
            status = json.loads((job / "status.json").read_text())
            assert status["status"] == "done"
            assert f"++{KEY}={t.params[KEY]!r}" in status["overrides"]
        assert t.value == pytest.approx(np.mean(finals(st.trial_dir(study, t.number))))


def test_the_search_finds_the_optimum_and_a_rerun_adds_nothing(tmp_path, capsys):
    study = tmp_path / "study"
    args = ["tune", *TINY, f"search={float_space(tmp_path)}", "trials=10", "random_trials=4"]
    args += ["pruner=none", f"study={study}"]
    assert main(args) == 0
    trials = load(study).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 10
    xs = {t.number: t.params[KEY] for t in trials}
    best = max(trials, key=lambda t: t.value)
    assert abs(best.params[KEY] - QuadraticEnv.OPTIMUM) < 0.2, xs
    # each trial's sampled x reached its env: value + 10 (x - 0.3)^2 is seed 200's noise, the same
    # in every trial
    noise = [t.value - 10.0 + 10.0 * (xs[t.number] - QuadraticEnv.OPTIMUM) ** 2 for t in trials]
    assert np.ptp(noise) < 1e-4 and abs(noise[0]) > 1e-3, noise

    capsys.readouterr()
    assert main(["report", str(study)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["rank", "trial", "state", "mean"] and len(lines) == 11
    assert lines[1].split()[:2] == ["1", str(best.number)]  # ranked by the objective
    assert main(["plot", str(study), f"out={tmp_path / 's.png'}"]) == 0
    assert (tmp_path / "s.png").read_bytes()[:4] == b"\x89PNG"

    # the same command again: ten trials finished, nothing runs; export writes the best values
    out = tmp_path / "tuned.yaml"
    assert main([*args, f"export={out}"]) == 0
    assert len(load(study).trials) == 10 and len(list(study.glob("trial-*"))) == 10
    assert "continuing" not in capsys.readouterr().out
    exported = OmegaConf.load(out)
    assert exported.env.kwargs.x == best.params[KEY]
    assert out.read_text().startswith("# @package _global_")


JOBLIB = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


SEEDS = ["seed0=210", "population_seed0=50"]  # other search seeds and population


@pytest.mark.parametrize(
    ("objective", "launcher", "seeds"), [("p10", [], []), ("count@9.5", JOBLIB, SEEDS)]
)
def test_the_population_objective_is_the_reports_statistic(
    tmp_path, objective, launcher, seeds, capsys
):
    study = tmp_path / "study"
    args = ["tune", *TINY, *launcher, f"search={float_space(tmp_path)}", "trials=1", "seeds=3"]
    args += seeds
    first, population = (210, [50, 51]) if seeds else (200, [100, 101])
    assert main([*args, f"objective={objective}", "pruner=none", f"study={study}"]) == 0
    (trial,) = load(study).trials
    folder = st.trial_dir(study, trial.number)
    by_hand = finals(folder)
    assert len(by_hand) == 3 and len(set(by_hand)) == 3  # three seeds, apart
    ran = sorted(OmegaConf.load(folder / d / "config.yaml").seed for d in ("0", "1", "2"))
    assert ran == [first, first + 1, first + 2]
    goal = 9.5 if objective.startswith("count") else None
    (row,) = rows(group_runs(find_runs([str(folder)])), goal)
    if goal is None:
        assert trial.value == pytest.approx(np.percentile(by_hand, 10)) == row["final_p10"]
    else:
        assert trial.value == sum(v >= goal for v in by_hand) == row["at_goal"]

    # confirm: the trial's settings on the held-out population, never a search seed
    confirm = [f"objective={objective}", "pruner=none", f"study={study}", "confirm=0"]
    assert main([*args, *confirm, "population_seeds=2"]) == 0
    jobs = [d for d in st.confirm_dir(study, 0).iterdir() if d.name.isdigit()]
    assert sorted(OmegaConf.load(d / "config.yaml").seed for d in jobs) == population
    out = capsys.readouterr().out.splitlines()
    assert any(line.startswith("trial 0 ") and " 2 " in line for line in out)  # its row: 2 seeds
    (values,) = [line.removeprefix("trial 0: ") for line in out if line.startswith("trial 0: ")]
    ran = OmegaConf.load(jobs[0] / ".hydra" / "overrides.yaml")
    assert KEY in values and set(values.split()) <= set(ran)  # pastes back: what the jobs ran


def test_a_trial_below_the_median_is_pruned(tmp_path, capsys):
    study = tmp_path / "study"
    space = space_file(tmp_path, f"params:\n  {KEY}: {{type: categorical, choices: [0.3, 3.0]}}\n")
    args = ["tune", *TINY, f"search={space}", "pruner_startup=1", f"study={study}"]
    assert main([*args, "trials=1"]) == 0
    s = load(study)
    s.enqueue_trial({KEY: 0.3})
    s.enqueue_trial({KEY: 3.0})
    assert main([*args, "trials=3"]) == 0
    trials = load(study).trials
    assert [t.state.name for t in trials[1:]] == ["COMPLETE", "PRUNED"]
    pruned = trials[2]
    assert pruned.params[KEY] == 3.0 and pruned.intermediate_values  # reported from its eval
    job = st.trial_dir(study, 2) / "0"
    assert json.loads((job / "status.json").read_text())["status"] == "pruned"
    assert not (job / "summary.json").exists()  # stopped at its periodic evaluation
    assert "trial 2: pruned" in capsys.readouterr().out
    assert main(["report", str(study)]) == 0
    assert "pruned" in capsys.readouterr().out

    # the plot's history marks it where the completed values leave it out
    assert results.pruned(load(study)) == [2] and results.history(load(study))[0] == [0, 1]


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
@pytest.mark.filterwarnings("ignore:env fake_envs")  # one-step episodes: no exact resume
def test_a_killed_study_resumes_to_exactly_n_trials(tmp_path, capsys):
    study = tmp_path / "study"
    args = killable(tmp_path, study, 4096, 1024, "seeds=2")
    proc = start_cli(*args, cwd=tmp_path)
    latest = st.trial_dir(study, 1) / "0" / "checkpoints" / "latest"
    deadline = time.monotonic() + 200
    while not latest.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)  # mid-trial: trial 1's first job holds a checkpoint
    proc.wait()
    assert latest.exists() and proc.returncode == -signal.SIGKILL
    assert not (st.trial_dir(study, 1) / "0" / "summary.json").exists()
    (running,) = [t for t in load(study).trials if t.state.name == "RUNNING"]

    assert main(args) == 0
    err = capsys.readouterr()
    assert f"trial {running.number}: continuing" in err.out and "resuming" in err.err
    trials = load(study).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert sorted(p.name for p in study.glob("trial-*")) == [f"trial-000{n}" for n in range(3)]
    assert_each_trial_ran_once(study, trials, seeds=2)


def test_parallel_trials_overlap_and_the_study_ends_with_n(tmp_path, capsys, monkeypatch):
    """parallel=2: each trial's sweep in its own process, two at a time, all told."""
    monkeypatch.setenv("PYTHONPATH", CLI_PYTHONPATH)  # the trials' processes import fake_envs
    study = tmp_path / "study"
    args = ["tune", *TINY, f"search={float_space(tmp_path)}", "trials=3", "parallel=2"]
    args += ["pruner=none", f"study={study}"]
    assert main(args) == 0
    trials = load(study).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    # trial 1 was asked for before trial 0 was told: they ran at once (one at a time, never)
    assert trials[1].datetime_start < trials[0].datetime_complete
    assert_each_trial_ran_once(study, trials, seeds=1)
    for t in trials:  # in processes of their own
        status = json.loads((st.trial_dir(study, t.number) / "0" / "status.json").read_text())
        assert status["pid"] != os.getpid()
        assert (study / "logs" / f"trial-{t.number:04d}.log").stat().st_size > 0
    assert "trial 2: started" in capsys.readouterr().out


def test_a_trial_process_that_ends_without_a_result_stops_the_search_with_its_line(
    tmp_path, capsys, monkeypatch
):
    """A trial's process that exits (not stopped) before its jobs wrote a status: one line, the
    trial's last output line and its log, exit 2; the trial stays running for a rerun."""
    from rltool.sweeps.tune import pool

    def broken(self, number, argv):
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.log(number), "a") as out:
            code = "print('progress'); print('rltool train: error: disk full'); raise SystemExit(2)"
            self.procs[number] = subprocess.Popen([sys.executable, "-c", code], stdout=out)

    monkeypatch.setattr(pool.Pool, "start", broken)
    study = tmp_path / "study"
    args = ["tune", *TINY, f"search={float_space(tmp_path)}", "trials=2", "parallel=2"]
    assert main([*args, "pruner=none", f"study={study}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "trial " in err[0] and "rltool train: error: disk full" in err[0]
    assert "(log: " in err[0] and "trial-000" in err[0]
    assert {t.state.name for t in load(study).trials} == {"RUNNING"}


def _wait_gone(pids: list[int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    for pid in pids:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"process {pid} still runs"
            time.sleep(0.05)


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
@pytest.mark.filterwarnings("ignore:env fake_envs")  # one-step episodes: no exact resume
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_stops_parallel_trials_at_a_checkpoint_and_a_rerun_ends_with_n(
    tmp_path, capsys, monkeypatch, sig
):
    """SIGTERM to the tune process: passed on once, the trials checkpoint, exit 75. SIGKILL: the
    kernel sends the trials SIGTERM (PR_SET_PDEATHSIG), the same checkpoints."""
    monkeypatch.setenv("PYTHONPATH", CLI_PYTHONPATH)
    study = tmp_path / "study"
    args = killable(tmp_path, study, 8192, 2048, "parallel=2")
    proc = start_cli(*args, cwd=tmp_path)
    latest = [st.trial_dir(study, n) / "0" / "checkpoints" / "latest" for n in (0, 1)]
    deadline = time.monotonic() + 200
    while not all(p.exists() for p in latest) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    jobs = [st.trial_dir(study, n) / "0" for n in (0, 1)]
    proc.send_signal(sig)  # to the tune process only (SIGTERM: it passes it on, once)
    out, err = proc.communicate(timeout=120)
    _wait_gone([json.loads((j / "status.json").read_text())["pid"] for j in jobs])
    if sig == signal.SIGTERM:
        assert proc.returncode == 75, err
        assert "run the same rltool tune command again" in err.strip().splitlines()[-1]
    assert [t.state.name for t in load(study).trials] == ["RUNNING"] * 2
    for n, job in enumerate(jobs):  # each stopped at a checkpoint of its own, not killed
        assert json.loads((job / "status.json").read_text())["status"] == "interrupted"
        assert "writing a checkpoint" in (study / "logs" / f"trial-{n:04d}.log").read_text()

    assert main(args) == 0
    assert "trial 0: continuing" in capsys.readouterr().out
    assert "resuming" in (study / "logs" / "trial-0000.log").read_text()
    trials = load(study).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:
        assert t.value == pytest.approx(np.mean(finals(st.trial_dir(study, t.number))))


def test_a_failed_trial_is_recorded_and_the_exit_status_says_so(tmp_path, capsys):
    study = tmp_path / "study"
    # 32 frames do not split over 3 envs: the job fails its config check, the trial fails
    space = space_file(tmp_path, "params:\n  env.num_envs: {type: categorical, choices: [3]}\n")
    args = ["tune", *TINY[:2], *TINY[3:], f"search={space}", "trials=1", f"study={study}"]
    assert main(args) == 1
    (trial,) = load(study).trials
    assert trial.state.name == "FAIL"
    assert "trial 0: failed: collector.frames_per_batch=32 is invalid" in capsys.readouterr().out
    assert main(["report", str(study)]) == 0
    assert capsys.readouterr().out.splitlines()[1].split()[:3] == ["-", "0", "fail"]


def test_a_second_process_on_a_study_is_refused(tmp_path, capsys):
    study = tmp_path / "study"
    args = ["tune", *TINY, f"search={float_space(tmp_path)}", "pruner=none", f"study={study}"]
    assert main([*args, "trials=1"]) == 0
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from rltool.runfolder import lock as runlock; "
            "runlock.acquire(sys.argv[1]); print('held', flush=True); time.sleep(60)",
            str(study),
        ],
        env={**os.environ, "PYTHONPATH": CLI_PYTHONPATH},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        assert main([*args, "trials=2"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "is in use by another rltool process" in err[0], err
    finally:
        holder.kill()
        holder.wait()
    assert len(load(study).trials) == 1 and not st.trial_dir(study, 1).exists()


def _tree(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in sorted(root.rglob("*"))}


LR = "params:\n  optim.lr: "
BAD = {  # case: (the space file, more arguments, what the one line says)
    "unknown key": ("params:\n  optim.lrr: {low: 0.1, high: 0.2}\n", [], "is not a config key"),
    "empty range": (LR + "{type: float, low: 0.1, high: 0.1}\n", [], "empty range"),
    "log at 0": (LR + "{type: float, low: 0.0, high: 0.1, log: true}\n", [], "log ranges"),
    "no choices": (LR + "{type: categorical, choices: []}\n", [], "at least one choice"),
    "bad field": (LR + "{type: float, lo: 0.1, high: 0.2}\n", [], "search space"),
    "trials=0": (None, ["trials=0"], "run at least 1 trial"),
    "seed given": (None, ["seed=3"], "sets the seeds itself"),
    "searched and set": (None, ["optim.lr=0.1"], "both searched and set"),
    "objective": (None, ["objective=p11"], "objective='p11' is invalid"),
    "bad config": (None, ["optim.lr=-1"], "optim.lr=-1"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys, case):
    body, extra, want = BAD[case]
    body = body or LR + "{type: float, low: 1.0e-4, high: 1.0e-3, log: true}\n"
    if case == "bad config":
        body = f"params:\n  {KEY}: {{type: float, low: 0.0, high: 1.0}}\n"
    space = space_file(tmp_path, body)
    before = _tree(tmp_path)
    args = ["tune", *TINY, f"search={space}", "trials=2", f"study={tmp_path / 'study'}", *extra]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and want in err[0] and "Traceback" not in err[0], err
    assert _tree(tmp_path) == before


def test_a_study_of_another_space_or_objective_or_without_optuna_is_refused(
    tmp_path, capsys, monkeypatch
):
    study = tmp_path / "study"
    args = ["tune", *TINY, f"search={float_space(tmp_path)}", "trials=1", "pruner=none"]
    assert main([*args, f"study={study}"]) == 0
    changes = [("objective=min", "another objective"), ("seed0=300", "another seed0")]
    for change, want in [*changes, ("", "another search space")]:
        if not change:  # the same file, another range
            float_space(tmp_path, low=-2.0)
        before = _tree(tmp_path)
        capsys.readouterr()
        assert main([*args, f"study={study}", *filter(None, [change])]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and want in err[0], err
        assert _tree(tmp_path) == before
    monkeypatch.setitem(sys.modules, "optuna", None)
    assert main([*args, f"study={tmp_path / 'new'}"]) == 2
    assert "needs optuna: pip install 'rltool[tune]'" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    ("name", "loss", "env"),
    [
        ("ppo_memory", "ppo", "cartpole_pomdp"),
        ("dqn_memory", "dqn", "cartpole_pomdp"),
        ("sac_memory", "sac", "pendulum_pomdp"),
    ],
)
def test_the_shipped_spaces_compose_into_valid_configs(name, loss, env):
    from rltool.cli.tune import compose_base

    space = sp.load(name)
    for kind, width in (("gru", True), ("mlp", False)):
        policy = [f"env={env}", f"policy={kind}", f"loss={loss}"]
        dcfg = compose_base(policy)
        added = sp.check_keys(space, dcfg, policy)
        for n in range(3):
            trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=n)).ask()
            values = sp.sample(space, trial, dcfg)
            assert ("policy.hidden_size" in values) == width  # conditional on a memory
            cfg = make_cfg(*policy, *sp.overrides(values, added))
            assert cfg.optim.lr == values["optim.lr"]
