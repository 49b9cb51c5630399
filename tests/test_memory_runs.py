"""minGRU, FFM and TrXL policies through the whole tool, as the LSTM: a PPO run stopped while
writing a checkpoint and resumed logs the same rows as one never stopped (exact resume), `rltool
eval` replays the final evaluation, `load_policy` acts with the model's own state; a recurrent
DQN run with burn-in and a memmap replay of windows runs end to end. Tiny runs (768 frames)."""

from __future__ import annotations

import json
import signal

import gymnasium as gym
import pytest
from conftest import TINY_EVAL, metric_rows, run_cli

import rltool
from rltool import keys as K
from rltool.cli import main
from rltool.run import checkpoint as ckpt

KINDS = ["mingru", "ffm", "trxl"]
PPO = [
    "env=cartpole_pomdp",
    "policy.hidden_size=16",
    "loss.epochs=2",
    "collector.frames_per_batch=128",
    "eval.every_frames=256",
    *TINY_EVAL,
    "checkpoint.every_frames=256",
    "total_frames=768",
]


def window(kind: str) -> list[str]:
    """TrXL's window, short enough to fill and slide in these runs (its own key)."""
    return ["policy.memory.window=4"] if kind == "trxl" else []


def train(tmp_path, *args, env=None):
    return run_cli("train", *args, cwd=tmp_path, env=env)


@pytest.mark.parametrize("kind", KINDS)
def test_stopped_and_resumed_run_matches_the_straight_run(kind, tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    r = train(tmp_path, *PPO, f"policy={kind}", *window(kind), f"hydra.run.dir={straight}")
    assert r.returncode == 0, r.stderr
    # killed while writing its 2nd checkpoint (512 frames): latest = 256, rows logged to 512
    kill = {"RLTOOL_CHECKPOINT_KILL": "after_temp_write@2"}
    r = train(tmp_path, *PPO, f"policy={kind}", *window(kind), f"hydra.run.dir={stopped}", env=kill)
    assert r.returncode == -signal.SIGKILL, r.stderr
    assert ckpt.load(ckpt.latest(stopped / "checkpoints"))["counters"]["frames"] == 256
    r = run_cli("train", f"resume={stopped}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert metric_rows(stopped) == metric_rows(straight)

    # `rltool eval` with the final evaluation's seed and count replays it
    summary = json.loads((straight / "summary.json").read_text())
    assert main(["eval", f"run={straight}", "episodes=2"]) == 0
    result = json.loads((straight / "eval.json").read_text())
    assert result["return_mean"] == summary["eval/return_mean"]

    # load_policy: the model's own state, carried step by step
    policy, state = rltool.load_policy(straight)
    specs = policy.module.state_specs
    assert all(state[k].shape[1:] == s.shape for k, s in specs.items())
    # the state also carries the previous action where the preset feeds it (TrXL's does)
    carried = set(specs) | ({K.PREV_ACTION} & set(policy.module.input_specs))
    assert set(state) == carried and (K.PREV_ACTION in carried) == (kind == "trxl")
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        action, state = policy(obs, state)
        obs, *_ = env.step(int(action))
    assert set(state) == carried


@pytest.mark.parametrize("kind", KINDS)
def test_recurrent_dqn_with_burn_in_runs_end_to_end(kind, tmp_path):
    run_dir = tmp_path / "run"
    r = train(
        tmp_path,
        "env=cartpole_pomdp",
        f"policy={kind}",
        "policy.hidden_size=16",
        *window(kind),
        "loss=dqn",
        "loss.warmup_frames=256",
        "buffer.burn_in=4",
        "buffer.seq_len=12",
        "buffer.batch_size=8",
        "buffer.storage=memmap",
        "total_frames=512",
        *TINY_EVAL,
        f"hydra.run.dir={run_dir}",
    )
    assert r.returncode == 0, r.stderr
    rows = metric_rows(run_dir)
    assert [int(x["frames"]) for x in rows] == [128, 256, 384, 512]
    assert all(float(x["loss_value"]) >= 0 for x in rows[2:])
