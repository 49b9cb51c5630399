"""`rltool train ... loss=dqn` from the command line: bad input is one line and exit 2; a tiny
recurrent run goes end to end through the same loop as PPO."""

import json
import math

import numpy as np
import pytest
import torch
import yaml
from conftest import TINY_EVAL, metric_rows
from tensordict import TensorDict

import rltool as rltool_lib
from rltool.cli import main
from rltool.losses import linear_schedule
from rltool.run import checkpoint as ckpt
from rltool.runfolder import layout


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["env=pendulum", "loss=dqn", "env.normalize_obs=false", "env.normalize_reward=false"],
            "loss=dqn needs a discrete action space",
        ),
        (["loss=dqn", "policy=gru", "buffer.seq_len=8", "buffer.burn_in=8"], "buffer.seq_len=8"),
        (["loss=dqn", "buffer.size=100"], "buffer.size=100"),
        (["loss=dqn", "loss.gamma=1.5"], "loss.gamma=1.5"),
        (["loss=dqn", "buffer.storage=disk"], "buffer.storage='disk'"),
        (["env=cartpole_pomdp", "loss=dqn", "env.normalize_obs=true"], "env.normalize_obs=True"),
    ],
    ids=["continuous", "burn_in", "size", "gamma", "storage", "normalize"],
)
def test_bad_input_is_one_line_exit_2(tmp_path, args, says, cli):
    r = cli("train", *args, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_recurrent_dqn_runs_end_to_end_with_a_memmap_buffer(tmp_path, cli):
    run_dir = tmp_path / "run"
    r = cli(
        "train",
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
        *TINY_EVAL,
        f"hydra.run.dir={run_dir}",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    rows = metric_rows(run_dir)
    # 128-frame batches (loss=dqn); updates from 256 frames on (warm-up), 2 per batch
    assert [int(x["frames"]) for x in rows] == [128, 256, 384, 512, 640, 768]
    assert rows[0]["loss_value"] == "" and all(
        math.isfinite(float(x[k])) for x in rows[1:] for k in ("loss_value", "q_mean")
    )
    # epsilon from 1 to loss=dqn's eps_end over tuned/cartpole_pomdp_gru_dqn's 10k frames, set
    # after each batch
    eps_end = yaml.safe_load(layout.RunFolder(run_dir).config.read_text())["loss"]["eps_end"]
    assert [float(x["epsilon"]) for x in rows] == pytest.approx(
        [linear_schedule(1.0, eps_end, 10_000, int(x["frames"])) for x in rows]
    )
    assert not (run_dir / "replay").exists()  # the run's scratch memmap is removed at the end

    # the final checkpoint holds the DQN parts and the replay buffer beside it
    path = ckpt.latest(run_dir / "checkpoints")
    assert path.name == "ckpt-000000000768.pt"
    dqn = ckpt.load(path)["state"]["dqn"]
    assert dqn["updates"] == 2 * 5 and dqn["epsilon"] == pytest.approx(float(rows[-1]["epsilon"]))
    assert (path.parent / "ckpt-000000000768.buffer" / "buffer.json").is_file()

    # the checkpoint restores as the Q-network it is, for `rltool eval` and `load_policy`: the
    # same seed and episode count replay the final evaluation of the training run exactly
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["frames"] == 768
    assert main(["eval", f"run={run_dir}", "episodes=2"]) == 0
    result = json.loads((run_dir / "eval.json").read_text())
    assert result["episodes"] == 2 and result["frames"] == 768
    assert result["return_mean"] == summary["eval/return_mean"]
    assert result["length_mean"] == summary["eval/length_mean"]
    assert float(rows[-1]["eval/return_mean"]) == summary["eval/return_mean"]
    policy, state = rltool_lib.load_policy(run_dir)
    assert policy.module.is_q and not policy.module.explore
    zero = {k: v.unsqueeze(0) for k, v in state.items()}  # [T=1, B=1, ...]: state, prev action
    for obs in np.random.default_rng(0).uniform(-0.2, 0.2, (8, 4)).astype(np.float32):
        action, _ = policy(obs, state)  # a full CartPole obs; the env layer masks the velocities
        td = {"observation": torch.tensor(obs[[0, 2]]).view(1, 1, 2), **zero}
        td["is_init"] = torch.ones(1, 1, 1, dtype=torch.bool)
        q, _, _ = policy.module.action_values(TensorDict(td, [1, 1]))
        assert int(action) == int(q.argmax(-1))  # greedy in exploit mode
