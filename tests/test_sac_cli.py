"""`rltool train ... loss=sac` from the command line: bad input is one line and exit 2; a tiny
recurrent SAC on the masked Pendulum goes end to end, and a SIGKILLed run resumes to the same
rows as a straight one."""

from __future__ import annotations

import signal

import pytest
from conftest import TINY_EVAL, metric_rows, start_cli

from rltool.run import checkpoint as ckpt

# recurrent SAC, tiny: 100 frames per batch, 5 updates on 4 windows of 8 (2 of burn-in)
SAC_GRU = [
    "env=pendulum_pomdp",
    "policy=gru",
    "loss=sac",
    "policy.hidden_size=8",
    "policy.hidden_sizes=[8]",
    "policy.encoder_sizes=[]",
    "collector.frames_per_batch=100",
    "loss.utd_ratio=5",
    "loss.warmup_frames=100",
    "buffer.seq_len=8",
    "buffer.burn_in=2",
    "buffer.batch_size=4",
    "buffer.size=1000",
    "eval.every_frames=200",
    "eval.max_episode_steps=20",
    *TINY_EVAL,
    "checkpoint.every_frames=200",
    "total_frames=500",
]


@pytest.mark.parametrize(
    "args, says",
    [
        (["env=cartpole", "loss=sac"], "loss=sac needs continuous (Box) actions"),
        (["env=pendulum", "loss=sac"], "env.normalize_obs=True"),
        (["env=pendulum_pomdp", "loss=sac", "loss.n_steps=3"], "loss.n_steps=3"),
        (["env=pendulum_pomdp", "loss=sac", "loss.alpha_init=0"], "loss.alpha_init=0"),
        (
            ["env=pendulum_pomdp", "loss=sac", "policy=gru", "policy.shared_torso=true"],
            "policy.shared_torso",
        ),
        (
            ["env=pendulum_pomdp", "loss=sac", "distributed.nproc_per_node=2"],
            "distributed.nproc_per_node",
        ),
    ],
    ids=["discrete", "normalize", "n_steps", "alpha", "shared", "distributed"],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, says, cli):
    r = cli("train", *args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, r.stderr


def rltool(*args, env=None):
    proc = start_cli("train", *args, env=env)
    _, err = proc.communicate(timeout=240)
    return proc.returncode, err


def test_gru_sac_stopped_and_resumed_matches_the_straight_run(tmp_path):
    straight_dir, run_dir = tmp_path / "straight", tmp_path / "run"
    code, err = rltool(*SAC_GRU, f"hydra.run.dir={straight_dir}")
    assert code == 0, err
    rows = metric_rows(straight_dir)
    assert [r["frames"] for r in rows] == ["100", "200", "300", "400", "500"]
    assert all(r["updates"] == "5" for r in rows) and float(rows[-1]["alpha"]) != 0.01
    # killed while writing its 2nd checkpoint (400 frames): resumed from 200
    code, _ = rltool(
        *SAC_GRU,
        f"hydra.run.dir={run_dir}",
        env={"RLTOOL_CHECKPOINT_KILL": "after_temp_write@2"},
    )
    assert code == -signal.SIGKILL
    body = ckpt.load(ckpt.latest(run_dir / "checkpoints"))
    assert body["counters"]["frames"] == 200 and body["state"]["sac"]["updates"] == 10
    code, err = rltool(f"resume={run_dir}")
    assert code == 0, err
    assert metric_rows(run_dir) == rows
