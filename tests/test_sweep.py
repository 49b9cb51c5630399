"""Multirun: status files, failures that do not stop a sweep, skip-done re-runs, the joblib and
submitit_local launchers, report tables and plots from real (tiny) sweeps."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import cli_env, metric_rows, start_cli, submitit_local
from wandb_records import run_record

from rltool.analysis.results import band, find_runs, group_runs
from rltool.analysis.tables import rows
from rltool.cli import main

# a tiny budget: 2 updates of 128 frames, evaluated twice on 2 episodes
BASE = [
    "total_frames=256",
    "eval.every_frames=128",
    "eval.episodes=2",
    "eval.final_episodes=2",
    "loss.epochs=2",
    "logger.progress=none",
]
TINY = [*BASE, "collector.frames_per_batch=128"]
# a 2x2 sweep where exactly one job is invalid: 100 frames do not split over 8 envs
ONE_FAILS = ["collector.frames_per_batch=128,100", "env.num_envs=4,8"]


def statuses(sweep: Path) -> dict[str, dict]:
    return {
        d.name: json.loads((d / "status.json").read_text())
        for d in sorted(sweep.iterdir())
        if (d / "status.json").exists()
    }


def test_basic_2x2_sweep_report_plot_and_rerun(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "policy.hidden_sizes=[8],[16]", "seed=0,1", *TINY]
    assert main([*args, f"hydra.sweep.dir={sweep}"]) == 0
    st = statuses(sweep)
    assert sorted(st) == ["0", "1", "2", "3"]
    assert all(s["status"] == "done" and s["error"] is None for s in st.values())
    for d in st:
        assert (sweep / d / "summary.json").exists() and (sweep / d / "metrics.csv").exists()
    assert "4 done" in capsys.readouterr().out

    table = rows(group_runs(find_runs([str(sweep)])))
    assert [(r["setting"], r["seeds"], r["status"]) for r in table] == [
        ("policy.hidden_sizes=[8]", 2, "2 done"),
        ("policy.hidden_sizes=[16]", 2, "2 done"),
    ]
    finals = [json.loads((sweep / d / "summary.json").read_text()) for d in ("0", "1")]
    returns = [f["eval/return_mean"] for f in finals]
    assert table[0]["final_mean"] == pytest.approx(np.mean(returns))
    assert (table[0]["final_min"], table[0]["final_max"]) == (min(returns), max(returns))
    assert table[0]["frames"] == 256

    assert main(["report", str(sweep), "format=markdown"]) == 0
    md = capsys.readouterr().out.splitlines()
    table_lines = [line for line in md if line.startswith("|")]
    assert md[0].startswith("| setting | seeds |") and len(table_lines) == 4  # header, rule, 2 rows
    assert "not POPGym's MMER" in md[-1]  # the note under the table: what best eval means
    png = tmp_path / "curves.png"
    assert main(["plot", str(sweep), f"out={png}"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000

    # the same sweep into the same folder: every job is skipped, nothing is rewritten
    mtimes = {d: (sweep / d / "metrics.csv").stat().st_mtime_ns for d in st}
    assert main([*args, f"hydra.sweep.dir={sweep}"]) == 0
    assert capsys.readouterr().out.count("done already, skipped") == 4
    assert statuses(sweep) == st
    assert {d: (sweep / d / "metrics.csv").stat().st_mtime_ns for d in st} == mtimes


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_one_failing_job_leaves_the_others_done(tmp_path, capsys, launcher):
    sweep = tmp_path / "sweep"
    extra = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"] if launcher == "joblib" else []
    args = ["train", "-m", *extra, *ONE_FAILS, *BASE, f"hydra.sweep.dir={sweep}"]
    assert main(args) == 1
    st = statuses(sweep)
    failed = [d for d, s in st.items() if s["status"] == "failed"]
    assert len(st) == 4 and failed == ["3"]
    assert "collector.frames_per_batch=100" in st["3"]["overrides"]
    assert "env.num_envs=8" in st["3"]["overrides"]
    assert "multiple of env.num_envs=8" in st["3"]["error"]
    err = capsys.readouterr().err
    assert "3 done, 1 failed: job 3 (collector.frames_per_batch=100 is invalid" in err

    assert main(["report", str(sweep)]) == 0
    out = capsys.readouterr().out
    assert "1 failed (collector.frames_per_batch=100 is invalid" in out
    if launcher == "basic":  # a re-run skips the three done jobs and retries the failed one
        done_before = {d: s for d, s in st.items() if d != "3"}
        assert main(args) == 1
        assert capsys.readouterr().out.count("done already, skipped") == 3
        after = statuses(sweep)
        assert {d: after[d] for d in done_before} == done_before
        assert after["3"]["status"] == "failed"


def test_rerun_into_a_folder_of_another_sweep_is_refused(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    assert main(["train", "-m", "seed=0", *TINY, f"hydra.sweep.dir={sweep}"]) == 0
    before = (sweep / "0" / "status.json").read_text()
    assert main(["train", "-m", "seed=5", *TINY, f"hydra.sweep.dir={sweep}"]) == 1
    assert "holds a job with other overrides" in capsys.readouterr().err
    after = json.loads((sweep / "0" / "status.json").read_text())
    assert after.pop("conflict").endswith("sweep into a fresh hydra.sweep.dir")
    assert after == json.loads(before)  # the done record is kept


def _unfinish(job: Path) -> None:
    status = json.loads((job / "status.json").read_text())
    (job / "status.json").write_text(json.dumps({**status, "status": "running"}))  # a kill


def test_interrupted_job_resumes_from_its_checkpoint(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    args = [
        "train",
        "-m",
        "seed=0",
        *TINY,
        "checkpoint.every_frames=128",
        f"hydra.sweep.dir={sweep}",
    ]
    assert main(args) == 0
    job, ck = sweep / "0", sweep / "0" / "checkpoints"
    full = metric_rows(job)
    # as if killed between the checkpoint at 128 frames and the end
    (ck / "ckpt-000000000256.pt").unlink()
    (ck / "latest").write_text("ckpt-000000000128.pt\n")
    (job / "summary.json").unlink()
    _unfinish(job)
    assert main(args) == 0
    assert "resuming" in capsys.readouterr().err
    assert json.loads((job / "status.json").read_text())["status"] == "done"
    assert metric_rows(job) == full  # exact resume: the same rows, none duplicated
    assert not list(job.glob("metrics.csv.interrupted-*"))


def test_interrupted_job_without_checkpoint_restarts_and_keeps_old_metrics(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "seed=0", *TINY, f"hydra.sweep.dir={sweep}"]
    assert main(args) == 0
    job = sweep / "0"
    shutil.rmtree(job / "checkpoints")  # killed before its first checkpoint
    _unfinish(job)
    old = (job / "metrics.csv").read_text()
    assert main(args) == 0
    assert json.loads((job / "status.json").read_text())["status"] == "done"
    assert (job / "metrics.csv.interrupted-1").read_text() == old
    assert len((job / "metrics.csv").read_text().splitlines()) == len(old.splitlines())


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
def test_submitit_local_two_jobs(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    overrides = ("seed=0,1", "logger=[csv,wandb]", "logger.wandb.mode=offline", *TINY)
    args = submitit_local(monkeypatch, sweep, *overrides)
    assert main(args) == 0
    st = statuses(sweep)
    assert sorted(st) == ["0", "1"] and {s["status"] for s in st.values()} == {"done"}
    assert "2 done" in capsys.readouterr().out
    for job in ("0", "1"):  # one wandb group per sweep, each job named by its overrides
        rid = (sweep / job / "wandb_id").read_text().strip()
        (path,) = (sweep / job).glob(f"wandb/offline-run-*-{rid}/run-{rid}.wandb")
        run = run_record(path)
        assert run.run_group == str(sweep)
        assert run.display_name.startswith(f"seed={job} logger=[csv,wandb] ")


def test_unknown_launcher_and_empty_report_are_one_line_errors(tmp_path, capsys):
    assert main(["train", "-m", "hydra/launcher=nope", "seed=0,1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "unknown option hydra/launcher=nope: choose one of basic, joblib" in err
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no runs found" in err
    assert main(["plot", str(tmp_path / "missing")]) == 2
    assert "no such folder" in capsys.readouterr().err


def test_band_interpolates_over_the_common_range():
    a = (np.array([0.0, 10.0, 20.0]), np.array([0.0, 10.0, 20.0]))
    b = (np.array([0.0, 5.0, 15.0]), np.array([2.0, 2.0, 4.0]))  # ends at 15
    x, mean, std = band([a, b])
    assert x.tolist() == [0.0, 5.0, 10.0, 15.0]
    bi = np.array([2.0, 2.0, 3.0, 4.0])  # b interpolated at x
    assert mean.tolist() == pytest.approx(((x + bi) / 2).tolist())
    assert std.tolist() == pytest.approx((np.abs(x - bi) / 2).tolist())


def test_run_job_statuses_for_stops_and_signals(tmp_path):
    from rltool.errors import EXIT_DIVERGED, EXIT_PREEMPTED, RunStopped, UserError
    from rltool.sweeps.jobs import Command, Job, read_status, run_job

    def stop(code):
        def fn(resume):
            raise RunStopped(f"stopped ({code})", code)

        return fn

    job, command = Job(tmp_path, multirun=True, overrides=["seed=0"], num=0), Command()
    assert run_job(job, stop(EXIT_DIVERGED), command) is None  # recorded; the sweep goes on
    assert read_status(tmp_path)["status"] == "failed"
    with pytest.raises(RunStopped):  # a signal: recorded, and the sweep stops
        run_job(job, stop(EXIT_PREEMPTED), command)
    assert read_status(tmp_path)["status"] == "interrupted"
    later = Job(tmp_path / "later", multirun=True, overrides=["seed=1"], num=1)
    with pytest.raises(RunStopped, match=r"stopped \(75\)"):  # no later job of it starts
        run_job(later, lambda resume: pytest.fail("started after the preemption"), command)
    assert not later.run_dir.exists()
    # the next command's sweep starts afresh (a new Command)
    with pytest.raises(KeyboardInterrupt):
        run_job(job, lambda resume: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert read_status(tmp_path)["status"] == "interrupted"
    calls = []
    assert run_job(job, lambda resume: calls.append(resume) or {"frames": 1}) == {"frames": 1}
    assert calls == [False] and read_status(tmp_path)["status"] == "done"  # no checkpoint here
    assert run_job(job, lambda resume: calls.append(resume)) is None  # done: skipped
    assert calls == [False]
    single = Job(tmp_path / "single", multirun=False, overrides=[], num=None)
    single.run_dir.mkdir()
    with pytest.raises(ValueError):  # a single run re-raises (the dispatcher prints one line)
        run_job(single, lambda resume: int("x"))
    assert read_status(single.run_dir)["error"].startswith("ValueError: invalid literal")
    before = (single.run_dir / "status.json").read_bytes()

    def refuse(resume):
        raise UserError("bad input")

    with pytest.raises(UserError):  # bad input leaves the folder as it was
        run_job(single, refuse)
    assert (single.run_dir / "status.json").read_bytes() == before


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
def test_sigterm_stops_the_whole_sweep_and_the_same_command_continues_it(tmp_path):
    """Hydra's launchers catch a job's exception and start the next job: after a SIGTERM, the
    jobs left must not start (the sweep exits 75 at once), and a re-run finishes them all."""
    sweep = tmp_path / "sweep"
    args = ["-m", "seed=0,1,2", "total_frames=6144", "checkpoint.every_frames=512"]
    args += ["logger.progress=none", f"hydra.sweep.dir={sweep}"]
    proc = start_cli("train", *args)
    deadline = time.monotonic() + 120
    while not (sweep / "0" / "checkpoints" / "latest").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    assert statuses(sweep)["0"]["status"] == "interrupted"
    assert not any((sweep / j / "status.json").exists() for j in ("1", "2"))  # never started
    rerun = start_cli("train", *args)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err
    st = statuses(sweep)
    assert sorted(st) == ["0", "1", "2"] and {s["status"] for s in st.values()} == {"done"}
    assert [int(r["frames"]) for r in metric_rows(sweep / "0")][-1] >= 6144


@pytest.mark.slow  # end to end, a process per job: ~1 min on CI
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_joblib_sweep_survives_the_loss_of_one_worker(tmp_path, sig):
    """Job 1's worker alone is stopped (SIGTERM: it checkpoints, interrupted) or killed (SIGKILL,
    as the out-of-memory killer does: failed, naming the signal) at its first checkpoint: jobs 0
    and 2 still finish, the sweep exits 1 naming job 1, and the same command resumes it."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1,2", *TINY[1:]]
    args += ["total_frames=512", "checkpoint.every_frames=128", f"hydra.sweep.dir={sweep}"]
    proc = start_cli("train", *args, env={"RLTOOL_JOB_SIGNAL": f"1:{sig}"})
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err
    st = statuses(sweep)
    assert {j: s["status"] for j, s in st.items() if j != "1"} == {"0": "done", "2": "done"}
    if sig == "SIGTERM":
        assert st["1"]["status"] == "interrupted"
        assert "rltool train: job 1 (seed=1 " in err and "): interrupted (stopped by SIGTERM" in err
    else:
        assert st["1"]["status"] == "failed" and "killed by SIGKILL" in st["1"]["error"]
        assert "rltool train: job 1 (seed=1 " in err
        assert ") failed: its process was killed by SIGKILL (kill -9, or the out-of-memory" in err
    assert "BrokenProcessPool" not in err and "internal error" not in err
    rerun = start_cli("train", *args)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert {s["status"] for s in statuses(sweep).values()} == {"done"}
    assert [int(r["frames"]) for r in metric_rows(sweep / "1")][-1] >= 512


@pytest.mark.slow  # end to end, a process per job: ~1 min on CI
def test_sigterm_to_a_joblib_sweeps_process_group_stops_it_with_75(tmp_path):
    """Slurm or a terminal signal every process of the sweep: the running jobs checkpoint, no
    other job starts, exit 75; the same command finishes them."""
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1,2"]
    args += ["total_frames=6144", "checkpoint.every_frames=512", "logger.progress=none"]
    args += [f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltool", "train", *args],
        env=cli_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a job step under Slurm
    )
    deadline = time.monotonic() + 120
    while not (sweep / "0" / "checkpoints" / "latest").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    st = statuses(sweep)
    assert st["0"]["status"] == "interrupted"
    assert "running" not in {s["status"] for s in st.values()}
    assert "2" not in st  # never started
    rerun = start_cli("train", *args)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err
    assert {s["status"] for s in statuses(sweep).values()} == {"done"} and len(statuses(sweep)) == 3


@pytest.mark.slow  # end to end, several processes: ~1 min on CI
def test_submitit_local_job_stopped_alone_is_interrupted_and_the_sweep_goes_on(
    tmp_path, monkeypatch, capsys
):
    """submitit_local runs each job in its own process: a SIGTERM to one stops that job only."""
    sweep = tmp_path / "sweep"
    overrides = ("seed=0,1", *TINY[1:], "total_frames=512", "checkpoint.every_frames=128")
    args = submitit_local(monkeypatch, sweep, *overrides)
    monkeypatch.setenv("RLTOOL_JOB_SIGNAL", "1:SIGTERM")
    assert main(args) == 1
    st = statuses(sweep)
    assert (st["0"]["status"], st["1"]["status"]) == ("done", "interrupted")
    out, err = capsys.readouterr()
    assert "1 done, job 1 interrupted" in out + err
    monkeypatch.delenv("RLTOOL_JOB_SIGNAL")
    assert main(args) == 0
    assert {s["status"] for s in statuses(sweep).values()} == {"done"}
