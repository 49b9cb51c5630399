"""`rltool train ... loss=dqn` from the command line: bad input is one line and exit 2; a tiny
recurrent run goes end to end through the same loop as PPO."""

import json

import numpy as np
import pytest
import torch
from conftest import run_cli
from tensordict import TensorDict

import rltool as rltool_lib
from rltool.cli import main


def rltool(*args, cwd):
    return run_cli("train", *args, cwd=cwd)


@pytest.mark.parametrize(
    "args, says",
    [
        (["env=pendulum", "loss=dqn"], "loss=dqn needs a discrete action space"),
        (["loss=dqn", "policy=gru", "buffer.seq_len=8", "buffer.burn_in=8"], "buffer.seq_len=8"),
        (["loss=dqn", "buffer.size=100"], "buffer.size=100"),
        (["loss=dqn", "loss.gamma=1.5"], "loss.gamma=1.5"),
        (["loss=dqn", "buffer.storage=disk"], "buffer.storage='disk'"),
        (["env=cartpole_pomdp", "loss=dqn", "env.normalize_obs=true"], "env.normalize_obs=True"),
    ],
    ids=["continuous", "burn_in", "size", "gamma", "storage", "normalize"],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, says):
    r = rltool(*args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_recurrent_dqn_runs_end_to_end_with_a_memmap_buffer(tmp_path):
    run_dir = tmp_path / "run"
    r = rltool(
        "env=cartpole_pomdp",
        "policy=gru",
        "loss=dqn",
        "loss.double_dqn=true",
        "loss.n_steps=3",
        "loss.utd_ratio=2",
        "loss.warmup_frames=256",
        "buffer.burn_in=4",
        "buffer.seq_len=12",
        "buffer.batch_size=8",
        "buffer.prioritized=true",
        "buffer.storage=memmap",
        "total_frames=768",
        "eval.episodes=2",
        "logger.progress=none",
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["frames"] == 768 and summary["eval/return_mean"] > 0
    header = (run_dir / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"loss_value", "q_mean", "td_error_abs_mean", "epsilon"} <= set(header)
    assert not (run_dir / "replay").exists()  # the run's scratch memmap is removed at the end

    # the checkpoint restores as the Q-network it is, for `rltool eval` and `load_policy`
    assert main(["eval", f"run={run_dir}", "episodes=2"]) == 0
    assert json.loads((run_dir / "eval.json").read_text())["episodes"] == 2
    policy, state = rltool_lib.load_policy(run_dir)
    assert policy.module.is_q and not policy.module.explore
    zero = {k: v.unsqueeze(0) for k, v in state.items()}  # [T=1, B=1, ...]: state, prev action
    for obs in np.random.default_rng(0).uniform(-0.2, 0.2, (8, 4)).astype(np.float32):
        action, _ = policy(obs, state)  # a full CartPole obs; the env layer masks the velocities
        td = {"observation": torch.tensor(obs[[0, 2]]).view(1, 1, 2), **zero}
        td["is_init"] = torch.ones(1, 1, 1, dtype=torch.bool)
        q, _, _ = policy.module.action_values(TensorDict(td, [1, 1]))
        assert int(action) == int(q.argmax(-1))  # greedy in exploit mode
