"""The memory registry: a user's memory (tests/custom_memory.py, a tiny gated RNN with a config key
of its own) trains from the command line (``policy.kind=custom_memory:tiny``) and from Python,
resumes, evaluates and loads, the stored config naming its module; bad names and keys are one
line each. Tiny runs (256 frames, resumed to 384)."""

from __future__ import annotations

import gymnasium as gym
import pytest
from conftest import make_cfg, metric_rows, run_cli
from custom_memory import TinyGatedRNN
from omegaconf import OmegaConf

import rltool
from rltool import memories
from rltool.cli import main
from rltool.config import PolicyConfig
from rltool.errors import ConfigError
from rltool.run import checkpoint as ckpt
from rltool.train import train

KIND = "custom_memory:tiny"
ARGS = [
    "env=cartpole_pomdp",
    "policy=lstm",
    f"policy.kind={KIND}",
    "+policy.memory.forget_bias=0.5",  # lstm.yaml lists no memory keys: a new one takes a +
    "policy.hidden_size=8",
    "loss.epochs=1",
    "collector.frames_per_batch=128",
    "eval.every_frames=128",
    "eval.episodes=1",
    "eval.final_episodes=2",
    "logger.progress=none",
    "checkpoint.every_frames=128",
    "total_frames=256",
]


def test_a_user_memory_trains_resumes_evaluates_and_loads_from_the_cli(tmp_path):
    run = tmp_path / "cli"
    r = run_cli("train", *ARGS, f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    saved = OmegaConf.load(run / "config.yaml").policy
    assert saved.kind == KIND and OmegaConf.to_container(saved.memory) == {"forget_bias": 0.5}
    assert ckpt.load(ckpt.latest(run / "checkpoints"))["config"]["policy"]["kind"] == KIND

    # from Python, the same config: the same numbers
    py = tmp_path / "py"
    py.mkdir()
    train(make_cfg(*ARGS), py)
    assert metric_rows(py) == metric_rows(run)

    r = run_cli("train", f"resume={run}", "total_frames=384", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert [int(x["frames"]) for x in metric_rows(run)] == [128, 256, 384]

    assert main(["eval", f"run={run}", "episodes=2"]) == 0
    policy, state = rltool.load_policy(run)
    rnn = policy.module.actor_torso.rnn
    assert isinstance(rnn, TinyGatedRNN) and rnn.forget_bias == 0.5
    assert set(state) == {"tiny_h", "critic_tiny_h"}
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    for _ in range(3):
        action, state = policy(obs, state)
        obs, *_ = env.step(int(action))
    assert state["tiny_h"].abs().sum() > 0


def test_the_registry_lists_it_and_names_bad_input_in_one_line():
    cfg = PolicyConfig(kind=KIND, memory={"forget_bias": 2.0})
    assert cfg.memory.forget_bias == 2.0 and "tiny" in memories.kinds()
    assert PolicyConfig(kind=KIND).memory.forget_bias == 1.0  # the schema's default
    bad = [
        ({"kind": KIND, "memory": {"window": 3}}, "policy.memory.window is not a key of memory"),
        ({"kind": KIND, "memory": {"forget_bias": float("inf")}}, "policy.memory.forget_bias"),
        ({"kind": "custom_memory:huge"}, "registers no memory 'huge'"),
        ({"kind": "no_such_module:tiny"}, "cannot import module 'no_such_module'"),
        ({"kind": "tinyy"}, "choose one of mlp, lstm, gru, mingru, ffm, trxl"),
    ]
    for kw, says in bad:
        with pytest.raises(ConfigError) as err:
            PolicyConfig(**kw)
        assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
