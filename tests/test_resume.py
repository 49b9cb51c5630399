"""`rltool train resume=<run_dir>`: exact resume, budget extension, signals, bad input."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY_EVAL, metric_rows, start_cli

from rltool.cli import main
from rltool.run import checkpoint as ckpt

# PPO-LSTM on the masked CartPole: 8 envs x 32 steps per batch, episodes cross batches
LSTM = [
    "env=cartpole_pomdp",
    "policy.kind=lstm",
    "policy.hidden_size=16",
    "loss.epochs=2",
    "eval.every_frames=512",
    *TINY_EVAL,
    "checkpoint.every_frames=512",
    "total_frames=1536",
]


def rltool(*args, env=None, wait=True):
    proc = start_cli("train", *args, env=env)
    if not wait:
        return proc
    _, err = proc.communicate(timeout=240)
    return proc.returncode, err


def snapshot(path: Path) -> dict:
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """Run A: the whole budget, never stopped."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    code, err = rltool(*LSTM, f"hydra.run.dir={run_dir}")
    assert code == 0, err
    return run_dir


def test_stopped_and_resumed_run_matches_the_straight_run_row_for_row(straight, tmp_path):
    run_dir = tmp_path / "run"
    # killed while writing its 2nd checkpoint (1024 frames): latest = 512, rows logged to 1024
    code, _ = rltool(
        *LSTM,
        f"hydra.run.dir={run_dir}",
        env={"RLTOOL_CHECKPOINT_KILL": "after_temp_write@2"},
    )
    assert code == -signal.SIGKILL
    assert [r["frames"] for r in metric_rows(run_dir)] == ["256", "512", "768", "1024"]
    body = ckpt.load(ckpt.latest(run_dir / "checkpoints"))
    assert body["counters"]["frames"] == 512
    lengths = body["state"]["episodes"]["env"]["episode_length"]
    assert (lengths > 0).any(), "the stop falls in the middle of episodes"

    code, err = rltool(f"resume={run_dir}")
    assert code == 0, err
    # no row missing, none twice, every value equal (time columns aside)
    assert metric_rows(run_dir) == metric_rows(straight)


def test_extending_the_budget_continues_the_schedule_without_a_jump(straight, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    (run_dir / "checkpoints" / "latest").write_text("ckpt-000000000512.pt\n")
    code, err = rltool(f"resume={run_dir}", "total_frames=2560")
    assert code == 0, err
    got = metric_rows(run_dir)
    assert [int(r["frames"]) for r in got] == list(range(256, 2561, 256))
    assert got[:2] == metric_rows(straight)[:2]
    lr = [float(r["lr"]) for r in got]
    lr0, p0 = 1e-3, 512 / 1536  # the default lr; progress at the resume point
    # from the value at 512 frames, linearly to 0 at the new budget: equal steps, no jump
    expected = [
        lr0 * (1 - (p0 + (1 - p0) * (f - 512) / (2560 - 512))) for f in range(768, 2561, 256)
    ]
    assert lr[2:] == pytest.approx(expected, abs=1e-12)
    steps = [a - b for a, b in zip(lr[1:], lr[2:], strict=False)]
    assert max(steps) - min(steps) < 1e-9 and lr[-1] == 0.0
    assert "total_frames: 2560" in (run_dir / "config.yaml").read_text()


def _wait_for_checkpoint(run_dir: Path, proc) -> None:
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoints" / "latest").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1]
        time.sleep(0.05)


def _read_until(proc, words: str) -> str:
    """``proc``'s stderr up to and including the first line holding ``words`` (the process
    prints it when it handled the event: no sleep to guess when)."""
    seen = ""
    while words not in seen:
        line = proc.stderr.readline()
        assert line, seen + proc.communicate(timeout=120)[1]  # it ended first
        seen += line
    return seen


# a checkpoint after every update (256 frames): the first one comes after one update, not two
MLP_LONG = ["logger.progress=none", "checkpoint.every_frames=256", "total_frames=10000000"]


def test_sigterm_finishes_the_update_writes_a_checkpoint_and_exits_75(tmp_path):
    run_dir = tmp_path / "run"
    proc = rltool(*MLP_LONG, f"hydra.run.dir={run_dir}", wait=False)
    _wait_for_checkpoint(run_dir, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 75, err
    assert "stopped by SIGTERM" in err and f"resume={run_dir}" in err
    body = ckpt.load(ckpt.latest(run_dir / "checkpoints"))
    assert int(metric_rows(run_dir)[-1]["frames"]) == body["counters"]["frames"]


def test_a_second_signal_exits_at_once(tmp_path):
    run_dir = tmp_path / "run"
    proc = rltool(*MLP_LONG, "loss.epochs=1000", f"hydra.run.dir={run_dir}", wait=False)
    _wait_for_checkpoint(run_dir, proc)
    before = ckpt.latest(run_dir / "checkpoints")
    # inside the next update (1,000 epochs: seconds), not at the check right after the
    # checkpoint: a signal there stopped the run before the second one came (a flaky CI run)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    seen = _read_until(proc, "finishing this update")  # the first one handled, not a sleep
    proc.send_signal(signal.SIGINT)  # the update (seconds) is still running
    err = seen + proc.communicate(timeout=120)[1]
    assert proc.returncode == 128 + signal.SIGINT, err
    assert "second SIGINT" in err
    assert ckpt.latest(run_dir / "checkpoints") == before
    ckpt.load(before)


# ---- bad input: one line, exit 2, nothing on disk changed (in-process: fast) ----


def call(capsys, *args) -> tuple[int, str]:
    code = main(["train", *args])
    err = capsys.readouterr().err.strip().splitlines()
    return code, err[-1] if err else ""


@pytest.fixture
def broken(straight, tmp_path):
    """A copy of run A to break; the test checks that the refusal changed nothing."""
    run_dir = tmp_path / "run"
    shutil.copytree(straight, run_dir)
    return run_dir


def _latest_file(run_dir: Path) -> Path:
    return ckpt.latest(run_dir / "checkpoints")


def _truncate(run_dir):
    p = _latest_file(run_dir)
    p.write_bytes(p.read_bytes()[:1000])


def _older_version(run_dir):
    p = _latest_file(run_dir)
    body = torch.load(p, weights_only=True)
    torch.save(body | {"version": 0}, p)


def _other_architecture(run_dir):
    p = run_dir / "config.yaml"
    p.write_text(p.read_text().replace("hidden_size: 16", "hidden_size: 32"))


def _no_checkpoint(run_dir):
    shutil.rmtree(run_dir / "checkpoints")


class Payload:
    def __reduce__(self):
        return (os.system, (f"touch {PWNED}",))


PWNED = Path(f"/tmp/rltool-test-pwned-{os.getpid()}")


def _pickle_payload(run_dir):
    p = _latest_file(run_dir)
    body = torch.load(p, weights_only=True)
    torch.save(body | {"counters": Payload()}, p)


@pytest.mark.parametrize(
    ("breakage", "overrides", "message"),
    [
        (_no_checkpoint, [], "holds no checkpoint"),
        (_truncate, [], "is truncated or not an rltool checkpoint"),
        (_older_version, [], "has format version 0; this rltool reads version 1"),
        (
            _other_architecture,
            [],
            "written with policy.hidden_size=16 but the run's config says 32",
        ),
        (_pickle_payload, [], "holds a pickled Python object (posix.system) and was refused"),
        (None, ["policy.hidden_size=32"], "policy.hidden_size cannot change when resuming"),
        (None, ["seed=1"], "seed cannot change when resuming"),
    ],
)
def test_bad_resume_input_is_one_line_exit_2_and_changes_nothing(
    broken, capsys, breakage, overrides, message
):
    if breakage:
        breakage(broken)
    before = snapshot(broken)
    code, line = call(capsys, f"resume={broken}", *overrides)
    assert code == 2 and message in line, line
    assert line.startswith("rltool train: error: ")
    assert snapshot(broken) == before
    assert not PWNED.exists()


def test_resume_of_a_missing_folder(capsys, tmp_path):
    code, line = call(capsys, f"resume={tmp_path / 'nope'}")
    assert code == 2 and "no such folder" in line


def test_a_new_run_into_a_folder_holding_a_checkpoint_is_refused(broken, capsys):
    before = snapshot(broken)
    code, line = call(capsys, f"hydra.run.dir={broken}")
    assert code == 2 and f"resume={broken}" in line and "already holds a checkpoint" in line
    assert snapshot(broken) == before


# DQN-GRU: replay buffer, target network, epsilon and update count must resume too
DQN_GRU = [
    "env=cartpole_pomdp",
    "loss=dqn",
    "policy=gru",
    "policy.hidden_size=16",
    "policy.hidden_sizes=[16]",
    "loss.utd_ratio=2",
    "loss.warmup_frames=128",
    "loss.eps_frames=512",
    "buffer.seq_len=8",
    "buffer.burn_in=2",
    "buffer.batch_size=4",
    "buffer.size=2048",
    "eval.every_frames=512",
    *TINY_EVAL,
    "checkpoint.every_frames=384",
    "total_frames=1024",
]


def test_dqn_gru_stopped_and_resumed_matches_the_straight_run(tmp_path):
    straight_dir, run_dir = tmp_path / "straight", tmp_path / "run"
    code, err = rltool(*DQN_GRU, f"hydra.run.dir={straight_dir}")
    assert code == 0, err
    code, _ = rltool(
        *DQN_GRU,
        f"hydra.run.dir={run_dir}",
        env={"RLTOOL_CHECKPOINT_KILL": "after_temp_write@2"},
    )
    assert code == -signal.SIGKILL
    body = ckpt.load(ckpt.latest(run_dir / "checkpoints"))
    assert body["counters"]["frames"] == 384 and body["state"]["dqn"]["updates"] > 0
    code, err = rltool(f"resume={run_dir}")
    assert code == 0, err
    assert metric_rows(run_dir) == metric_rows(straight_dir)
