"""Faults of the OS, not of rltool: a full disk, a folder rltool may not write. Each is one line
naming the path and the fix, exit 5 (EXIT_OS), no temp file left, status.json saying how the run
ended, and a resume that continues exactly once the fault is gone. The faults come from the
``write`` fault point (``RLTOOL_WRITE_FAULT``, ``_faults.test_hook``), not a tmpfs."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat

import pytest
from conftest import TINY_EVAL, metric_rows, run_cli

from rltool.cli import main
from rltool.errors import EXIT_OS, EXIT_USAGE, OSFault
from rltool.runfolder.writes import atomic_write, check_writable
from rltool.sweeps import jobs as sweep
from rltool.testing import faults as _faults

TINY = [
    "env=cartpole",
    "total_frames=1024",
    "checkpoint.every_frames=256",
    *TINY_EVAL,
]


def leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.rglob("*") if "tmp" in p.name or "probe" in p.name)


def fail_writes(monkeypatch, code: int, match: str = "") -> None:
    def hook(point: str) -> None:
        if point.startswith("write:") and match in point:
            raise OSError(code, os.strerror(code), point.removeprefix("write:"))

    monkeypatch.setattr(_faults, "test_hook", hook)


def test_a_refused_atomic_write_names_the_path_and_leaves_no_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "status.json"
    target.write_text("old")

    def half_written(f):
        f.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(OSFault, match=r"cannot write .*status.json: no space left on device"):
        atomic_write(target, half_written)
    assert target.read_text() == "old" and leftovers(tmp_path) == []
    fail_writes(monkeypatch, errno.EROFS)
    with pytest.raises(OSFault, match="read-only file system .*make the folder writable"):
        check_writable(tmp_path / "eval.json")


def test_status_records_the_failure_in_place_when_the_disk_is_full(tmp_path, monkeypatch):
    job = sweep.Job(tmp_path, multirun=False, overrides=["env=cartpole"], num=None)

    def train(resume):  # the disk fills up under the run: every write is refused from now on
        fail_writes(monkeypatch, errno.ENOSPC)
        raise OSFault("cannot write ckpt: no space left on device (ENOSPC): free space")

    with pytest.raises(OSFault):
        sweep.run_job(job, train)
    status = sweep.read_status(tmp_path)
    assert status["status"] == "failed" and "no space left" in status["error"]
    assert leftovers(tmp_path) == []
    # a disk full from the start: the status stays the last complete one, never "running"
    monkeypatch.setattr(_faults, "test_hook", None)
    sweep.write_status(tmp_path, status="done")
    fail_writes(monkeypatch, errno.ENOSPC)
    with pytest.raises(OSFault):
        sweep.run_job(job, lambda resume: {})
    assert sweep.read_status(tmp_path)["status"] == "done"


def test_full_disk_at_a_checkpoint_is_exit_5_and_resume_continues_exactly(tmp_path):
    whole = run_cli("train", *TINY, "hydra.run.dir=whole", cwd=tmp_path)
    assert whole.returncode == 0, whole.stderr
    env = {"RLTOOL_WRITE_FAULT": "ENOSPC:*/ckpt-*.pt@2"}  # the checkpoint at 512 frames
    r = run_cli("train", *TINY, "hydra.run.dir=run", cwd=tmp_path, env=env)
    run = tmp_path / "run"
    assert r.returncode == EXIT_OS, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "ckpt-000000000512.pt: no space left on device (ENOSPC): free space" in line
    assert "bug" not in r.stderr
    assert leftovers(run) == []
    status = json.loads((run / "status.json").read_text())
    assert status["status"] == "failed" and "no space left" in status["error"]
    assert (run / "checkpoints" / "latest").read_text().strip() == "ckpt-000000000256.pt"
    # space freed: the resume continues from 256 frames as if nothing had happened
    r = run_cli("train", "resume=run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert metric_rows(run) == metric_rows(tmp_path / "whole")
    assert json.loads((run / "status.json").read_text())["status"] == "done"


def _read_only(folder) -> bool:
    """chmod a-w on ``folder`` and all in it; whether that really refuses a write (root: not)."""
    for p in [folder, *folder.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        (folder / ".probe").write_text("")
    except PermissionError:
        return True
    (folder / ".probe").unlink()
    return False


def test_a_read_only_run_folder_is_exit_5_for_resume_and_eval(tmp_path, monkeypatch, capsys):
    args = ["env=cartpole", "total_frames=256", *TINY_EVAL, "hydra.run.dir=run"]
    r = run_cli("train", *args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "run", copy)
    env = {} if _read_only(copy) else {"RLTOOL_WRITE_FAULT": "EACCES"}  # root ignores modes
    try:
        r = run_cli("train", "resume=copy", "total_frames=512", cwd=tmp_path, env=env)
        assert r.returncode == EXIT_OS, r.stderr
        assert "copy/.lock: permission denied (EACCES): make the folder writable" in r.stderr
        assert "bug" not in r.stderr
        # eval finds out before it plays a single episode
        played = []
        monkeypatch.setattr("rltool.cli.eval.evaluate_run", lambda a: played.append(a))
        if env:
            fail_writes(monkeypatch, errno.EACCES, "eval.json")
        assert main(["eval", f"run={copy}"]) == EXIT_OS
        assert played == [] and leftovers(copy) == []
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "copy the run" in err  # every fix, out= among them
        assert err.endswith("write the results elsewhere: rltool eval run=... out=<writable file>")
    finally:
        for p in [copy, *copy.rglob("*")]:
            p.chmod(p.stat().st_mode | stat.S_IWUSR)


def test_eval_refuses_a_checkpoint_of_another_run(tmp_path, cli, tiny_run):
    shutil.copytree(tiny_run, tmp_path / "cart")
    args = ["env=pendulum", "total_frames=256", *TINY_EVAL, f"hydra.run.dir={tmp_path / 'pend'}"]
    assert main(["train", *args]) == 0
    cart = tmp_path / "cart" / "checkpoints"
    (pend_ckpt,) = (tmp_path / "pend" / "checkpoints").glob("ckpt-*.pt")
    (cart_ckpt,) = cart.glob("ckpt-*.pt")
    shutil.copy(pend_ckpt, cart_ckpt)  # another run's file under this run's name
    r = cli("eval", f"run={tmp_path / 'cart'}", "episodes=1", cwd=tmp_path)
    assert r.returncode == EXIT_USAGE, r.stderr
    assert "was written with env.id='Pendulum-v1' but the run's config says 'CartPole-v1'" in (
        r.stderr
    )
    assert not (tmp_path / "cart" / "eval.json").exists()
