"""Run folders that cannot be corrupted: one writer at a time (the lock), refused commands that
leave nothing behind, and the line that ends a run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import cli_env, run_cli, start_cli

from rltool.cli import main
from rltool.errors import EXIT_OK, EXIT_USAGE
from rltool.runfolder import lock as runlock

TINY = ["total_frames=256", "eval.episodes=2", "loss.epochs=1", "logger.progress=none"]


def files(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` with its bytes (and every folder, as None)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        out[str(p.relative_to(folder))] = p.read_bytes() if p.is_file() else None
    return out


def wait_for(cond, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.2)


def holder_process(run_dir: Path) -> subprocess.Popen:
    """Another process that takes ``run_dir``'s lock and sleeps (printing 'held' once held)."""
    code = (
        "import sys, time; from rltool.runfolder import lock as runlock; "
        f"runlock.acquire({str(run_dir)!r}); print('held', flush=True); time.sleep(300)"
    )
    p = subprocess.Popen(
        [sys.executable, "-c", code], env=cli_env(), stdout=subprocess.PIPE, text=True
    )
    assert p.stdout.readline().strip() == "held"
    return p


# ---- the lock ----
def test_second_writer_refused_then_free_after_sigkill(tmp_path):
    run = tmp_path / "run"
    first = start_cli(
        "train",
        f"hydra.run.dir={run}",
        "total_frames=10000000",
        "logger.progress=none",
        cwd=tmp_path,
    )
    try:
        wait_for(lambda: (run / "metrics.csv").is_file())
        holder = (run / ".lock").read_text()
        assert f"pid {first.pid}" in holder
        before = files(run)
        for args in ([f"hydra.run.dir={run}", *TINY], [f"hydra.run.dir={run}", "seed=3"]):
            r = run_cli("train", *args, cwd=tmp_path)
            assert r.returncode == EXIT_USAGE, r.stderr
            lines = r.stderr.strip().splitlines()
            assert len(lines) == 1 and "in use by another rltool process" in lines[0]
            assert f"pid {first.pid}" in lines[0], lines
        after = files(run)
        for name in ("status.json", "config.yaml", ".lock", ".hydra/overrides.yaml"):
            assert after[name] == before[name], name  # the refused writer touched nothing
        assert runlock.held_elsewhere(run)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the OS dropped the lock with its process: free, without any clean-up
    assert not runlock.held_elsewhere(run)
    assert runlock.acquire(run)
    runlock.release(run)


def test_sweep_rerun_skips_a_job_a_live_process_holds(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "seed=0,1", *TINY, f"hydra.sweep.dir={sweep}"]
    assert main(args) == EXIT_OK
    capsys.readouterr()
    status = json.loads((sweep / "0" / "status.json").read_text())
    status["status"] = "running"  # as if job 0's first process still ran
    (sweep / "0" / "status.json").write_text(json.dumps(status))
    live = holder_process(sweep / "0")
    before = files(sweep / "0")
    try:
        rc = main(args)
        out = capsys.readouterr()
    finally:
        live.kill()
        live.wait()
    assert rc == EXIT_OK, out  # not counted as failed: it runs elsewhere
    assert "job 0 (seed=0" in out.err and "skipped, another live process holds it" in out.err
    assert f"pid {live.pid}" in out.err
    assert "job 1 (seed=1" in out.out and "done already, skipped" in out.out
    assert "1 done, 1 running elsewhere (skipped: job 0)" in out.out
    # Hydra rewrote its own .hydra/ record (the same overrides) before the lock was tried;
    # nothing of the run changed
    after = files(sweep / "0")
    assert {k: v for k, v in after.items() if not k.startswith(".hydra")} == {
        k: v for k, v in before.items() if not k.startswith(".hydra")
    }


# ---- refusals leave nothing ----
@pytest.mark.parametrize(
    "args",
    [
        ["env=gym", "env.id=CartPol-v1"],
        ["loss=dqn", "env=pendulum"],
        ["collector.device=cuda:77"],
        ["policy=nope"],
        ["policy=base_policy"],
        ["total_frames=-1"],
        ["foo=1"],
        ["logger=[csv,wandb]", "logger.wandb.mode=offline"],  # wandb missing (simulated)
    ],
)
def test_refused_run_leaves_no_folder(tmp_path, monkeypatch, capsys, args):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` fails: a missing package
    assert main(["train", *TINY, *args]) == EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "error" in err[0], err
    assert list(tmp_path.iterdir()) == []  # no outputs/<date>/<time>/, no outputs/


def test_refusal_in_an_existing_run_dir_keeps_it(tmp_path, monkeypatch, capsys):
    run = tmp_path / "mine"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    monkeypatch.setitem(sys.modules, "wandb", None)
    for args in (["env=gym", "env.id=CartPol-v1"], ["logger=[csv,wandb]"], ["seed=-1"]):
        assert main(["train", *TINY, *args, f"hydra.run.dir={run}"]) == EXIT_USAGE
        assert files(run) == {"notes.txt": b"mine"}
    capsys.readouterr()


def test_refused_resume_leaves_the_folder_byte_identical(tmp_path, monkeypatch, capsys):
    run = tmp_path / "run"
    assert main(["train", *TINY, f"hydra.run.dir={run}"]) == EXIT_OK
    monkeypatch.setitem(sys.modules, "wandb", None)
    refused = [
        ["total_frames=512", "logger=[csv,wandb]"],  # refused inside the run: wandb missing
        ["total_frames=512", "checkpoint.keep=0"],  # refused when the config is checked
        ["total_frames=abc"],  # refused by Hydra, the folder locked already
        ["total_frames=512", "seed=3"],  # refused before Hydra starts
        ["total_frames=512", "policy=base_policy"],
    ]
    for older in (False, True):
        if older:  # a run folder of an older rltool: no lock file, and no log
            (run / ".lock").unlink()
            (run / "train.log").unlink()
        before = files(run)
        capsys.readouterr()
        for args in refused:
            assert main(["train", f"resume={run}", *args]) == EXIT_USAGE, args
            assert files(run) == before, args
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == len(refused), err


def test_end_line_names_the_folder_and_goes_to_train_log(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["train", *TINY]) == EXIT_OK
    (run,) = (tmp_path / "outputs").glob("*/*")
    rel = os.path.relpath(run, tmp_path)
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"rltool train: {rel}: final eval ")
    assert f"rltool eval run={rel}" in out[-1] and f"rltool train resume={rel}" in out[-1]
    assert " 256 frames, " in out[-1]
    assert (run / "train.log").read_text().strip().splitlines()[-1] == out[-1]
