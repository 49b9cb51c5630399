"""`rltool train ... loss=sac` from the command line: bad input is one line and exit 2; a tiny
recurrent SAC on the masked Pendulum goes end to end, and a SIGKILLed run resumes to the same
rows as a straight one."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import TINY_EVAL, metric_rows, start_cli
from test_export import _meta, _onnx_step

from rltool.deploy.export import export_policy
from rltool.deploy.inference import load_policy
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


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The tiny recurrent SAC run, never stopped."""
    run_dir = tmp_path_factory.mktemp("straight") / "run"
    code, err = rltool(*SAC_GRU, f"hydra.run.dir={run_dir}")
    assert code == 0, err
    return run_dir


def test_gru_sac_stopped_and_resumed_matches_the_straight_run(straight, tmp_path):
    run_dir = tmp_path / "run"
    rows = metric_rows(straight)
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


def test_export_carries_the_actor_alone_and_acts_as_load_policy(straight, tmp_path):
    """The exported step: the greedy (scaled tanh of the mean) action of load_policy, from the
    actor's state only (no critic memory in the file)."""
    path = export_policy(straight, "onnx", out=tmp_path / "policy.onnx")
    names = [r["name"] for r in json.loads(_meta(path))["inputs"]]
    assert not [n for n in names if "critic" in n] and any("state" in n for n in names)
    step, (policy, ref) = _onnx_step(path), load_policy(straight)
    env = gym.make("Pendulum-v1")
    obs = env.reset(seed=0)[0]
    state = {k: np.zeros_like(v.numpy()) for k, v in ref.items() if k in names}
    is_init, reward = np.ones((1, 1), bool), np.zeros((1, 1), np.float32)
    for _ in range(20):
        action, ref = policy(obs[None], ref, reward=reward)
        feed = {**state, "observation": obs[None], "is_init": is_init, "prev_reward": reward}
        out = step({k: v for k, v in feed.items() if k in names})
        np.testing.assert_allclose(out["action"], action, rtol=1e-5, atol=1e-5)
        state = {k[len("next_") :]: v for k, v in out.items() if k.startswith("next_")}
        obs, r, *_ = env.step(action[0])
        is_init, reward = np.zeros((1, 1), bool), np.full((1, 1), r, np.float32)


@pytest.mark.slow  # ~2 min on 2 busy cores
def test_mlp_sac_learns_the_fully_observed_pendulum(tmp_path):
    """A learning check of the loss itself (not of memory): the tuned MLP SAC with the whole
    observation (env.obs_keep=null), seed 0, 8k frames. Measured: eval -135 at 6k, -157.5 at
    8k (random: about -1,200). The recurrent -V check of issue #54 is not here (its update
    costs ~0.6 s on this machine's CPUs)."""
    run_dir = tmp_path / "run"
    args = ["env=pendulum_pomdp", "policy=mlp", "loss=sac", "env.obs_keep=null"]
    code, err = rltool(
        *args,
        "total_frames=8000",
        "eval.every_frames=8000",
        "eval.final_episodes=5",
        "logger.progress=none",
        f"hydra.run.dir={run_dir}",
    )
    assert code == 0, err
    assert float(metric_rows(run_dir)[-1]["eval/return_mean"]) > -400
