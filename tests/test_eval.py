"""Evaluation: fixed per-env episode quotas, ``rltool eval`` on a trained run (stats, eval.json,
video, bad input), and ``rltool.load_policy`` reproducing eval's actions step for step."""

from __future__ import annotations

import dataclasses
import json
import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch

import rltool
from rltool.cli import main
from rltool.config import EnvConfig, PolicyConfig
from rltool.deploy.inference import restore
from rltool.envs import make_env
from rltool.errors import UserError
from rltool.modules import make_policy
from rltool.run.evaluation import evaluate, run_episodes


class FixedLength(gym.Env):
    """Episodes of 3 steps when first seeded with an even seed, 10 with an odd one; reward 1."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,))
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.length = 3 if seed % 2 == 0 else 10
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.length, False, {}


gym.register("rltool_test/FixedLength-v0", entry_point=FixedLength)


def test_episode_quotas_do_not_favour_short_episodes():
    env = make_env(EnvConfig(id="rltool_test/FixedLength-v0", num_envs=2), training=False)
    policy = make_policy(PolicyConfig(), env.specs)
    # env 0 (seed 0) ends every 3 steps, env 1 (seed 1) every 10: quotas 2 and 3 for 5 episodes
    returns, lengths = run_episodes(policy, env, seed=0, episodes=5)
    assert lengths == [3, 3, 10, 10, 10] and returns == [3.0, 3.0, 10.0, 10.0, 10.0]
    stats = evaluate(policy, env, seed=0, episodes=5)
    assert stats["eval/return_mean"] == pytest.approx(36 / 5)
    assert stats["eval/return_std"] == pytest.approx(np.std(returns, ddof=1))
    assert (stats["eval/length_min"], stats["eval/length_max"], stats["eval/episodes"]) == (
        3,
        10,
        5,
    )
    # the step guard: 12 vector steps end 4 episodes of env 0 (quota 2) and 1 of env 1
    assert run_episodes(policy, env, seed=0, episodes=5, max_steps=12)[1] == [3, 3, 10]
    assert policy.explore  # exploit mode was only for the evaluation
    env.close()


@pytest.fixture(scope="module")
def lstm_run(tmp_path_factory):
    """A tiny LSTM run with observation normalisation (frozen at eval)."""
    run = tmp_path_factory.mktemp("eval") / "run"
    args = [
        "train",
        "policy.kind=lstm",
        "policy.hidden_size=16",
        "env.normalize_obs=true",
        "total_frames=512",
        "collector.frames_per_batch=256",
        "eval.every_frames=512",
        "eval.episodes=2",
        "eval.final_episodes=2",
        "loss.epochs=2",
        "logger.progress=none",
        f"hydra.run.dir={run}",
    ]
    assert main(args) == 0
    return run


def test_eval_command_writes_stats_of_n_episodes(lstm_run, capsys):
    assert main(["eval", f"run={lstm_run}", "episodes=5", "num_envs=2", "seed=7"]) == 0
    out = capsys.readouterr().out
    result = json.loads((lstm_run / "eval.json").read_text())
    assert result["episodes"] == 5 and len(result["returns"]) == 5 and result["seed"] == 7
    assert result["return_mean"] == pytest.approx(np.mean(result["returns"]))
    assert result["return_min"] == min(result["returns"])
    assert result["length_max"] == max(result["lengths"])
    assert f"return {result['return_mean']:.2f} +- {result['return_std']:.2f}" in out
    # the same protocol through the library gives the same episodes
    restored = restore(lstm_run)
    env = restored.make_env(2)
    assert run_episodes(restored.policy, env, 7, 5) == (result["returns"], result["lengths"])
    env.close()


def test_load_policy_reproduces_eval_actions(lstm_run):
    restored = restore(lstm_run)
    env = restored.make_env(1)
    trace: list[torch.Tensor] = []
    (ret,), (length,) = run_episodes(restored.policy, env, seed=11, episodes=1, trace=trace)
    env.close()
    eval_actions = [int(a[0]) for a in trace[:length]]

    policy, state = rltool.load_policy(lstm_run)
    assert not policy.module.explore and not policy.module.training
    assert set(state) == {
        "recurrent_state_h",
        "recurrent_state_c",
        "critic_recurrent_state_h",
        "critic_recurrent_state_c",
    }
    genv = gym.make("CartPole-v1")
    obs, _ = genv.reset(seed=11)
    actions, total = [], 0.0
    while True:
        action, state = policy(obs, state)
        actions.append(int(action))
        obs, reward, terminated, truncated, _ = genv.step(action)
        total += reward
        if terminated or truncated:
            break
    assert actions == eval_actions and total == ret


def test_eval_records_video(lstm_run):
    assert main(["eval", f"run={lstm_run}", "episodes=1", "video=true"]) == 0
    result = json.loads((lstm_run / "eval.json").read_text())
    assert len(result["videos"]) == 1 and result["videos"][0].endswith(".mp4")
    assert (lstm_run / "videos" / "rl-video-episode-0.mp4").stat().st_size > 1000


def test_eval_bad_input_is_one_line(lstm_run, tmp_path, capsys):
    def one_error(args, text):
        assert main(["eval", *args]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and text in err, err

    one_error([f"run={tmp_path}"], "holds no checkpoint")
    one_error([f"run={tmp_path / 'nope'}"], "no such folder")
    one_error([], "needs run=<run folder>")
    one_error(
        [f"run={lstm_run}", "episodes=many"], "episodes='many' is invalid: expected an integer"
    )
    one_error([f"run={lstm_run}", "episode=3"], "unknown option 'episode' (did you mean episodes")
    one_error([f"run={lstm_run}", "checkpoint=nope"], "checkpoint 'nope' not found")
    assert main(["eval", f"run={lstm_run}", "checkpoint=512", "episodes=1"]) == 0  # by frames
    assert json.loads((lstm_run / "eval.json").read_text())["checkpoint"] == "ckpt-000000000512.pt"
    one_error(  # a file it cannot write is bad input, not a bug
        [f"run={lstm_run}", "episodes=1", f"out={tmp_path / 'no' / 'such' / 'e.json'}"],
        "cannot write it",
    )
    broken = tmp_path / "broken"
    shutil.copytree(lstm_run, broken)
    (ckpt,) = (broken / "checkpoints").glob("ckpt-*.pt")
    ckpt.write_bytes(ckpt.read_bytes()[:100])  # truncated
    one_error([f"run={broken}"], "is truncated")
    torch.save({"policy": FixedLength}, ckpt)  # a pickled class: refused, never run
    one_error([f"run={broken}"], "holds a pickled Python object")


def test_eval_help_lists_each_argument_on_one_line(capsys):
    assert main(["eval", "--help"]) == 0
    out = capsys.readouterr().out
    lines = [ln.split() for ln in out.splitlines() if ln.startswith("  ")]
    from rltool.cli.eval import EvalArgs

    names = [f.name for f in dataclasses.fields(EvalArgs)]
    assert [ln[0].split("=")[0] for ln in lines] == names
    assert all(len(ln) > 1 for ln in lines)  # each with its meaning
    assert '"""' not in out and "``" not in out  # not a raw docstring


def test_eval_uses_the_runs_threads(lstm_run, monkeypatch):
    seen = []
    monkeypatch.setattr(torch, "set_num_threads", seen.append)
    assert main(["eval", f"run={lstm_run}", "episodes=1"]) == 0
    assert seen[0] == 1  # the run's num_threads, before anything else ran
    assert main(["eval", f"run={lstm_run}", "episodes=1", "num_threads=2"]) == 0
    assert seen[-1] == 2


def test_load_policy_names_the_shape_it_takes(lstm_run):
    policy, state = rltool.load_policy(lstm_run)
    with pytest.raises(UserError, match=r"shape \[3\] does not fit .* shape \[4\]"):
        policy(np.zeros(3, dtype=np.float32), state)
    with pytest.raises(UserError, match=r"\[B, 4\]"):
        policy(np.zeros((2, 5), dtype=np.float32), state)
    with pytest.raises(UserError, match=r"policy.initial_state\(2\)"):
        policy(np.zeros((2, 4), dtype=np.float32), state)
    action, _ = policy(np.zeros((2, 4), dtype=np.float32), policy.initial_state(2))
    assert action.shape == (2,)


@pytest.mark.slow
@pytest.mark.timeout(1800)  # a whole 100k-frame run
def test_fresh_cartpole_checkpoint_evaluates_to_475(tmp_path):
    run = tmp_path / "run"
    assert main(["train", "logger.progress=none", f"hydra.run.dir={run}"]) == 0
    assert main(["eval", f"run={run}", "episodes=20"]) == 0
    result = json.loads((run / "eval.json").read_text())
    assert result["episodes"] == 20 and result["return_mean"] >= 475
