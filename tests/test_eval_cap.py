"""An evaluation ends in reasonable time: episodes are cut at eval.max_episode_steps (null: the
env's time limit, else 10,000) as a time limit would cut them, counted in eval/episodes_cut, with
one warning line."""

from __future__ import annotations

import pytest
import torch
from conftest import make_cfg, metric_rows

from rltool import errors
from rltool.collectors import Collector
from rltool.config import EnvConfig, EvalConfig, PolicyConfig
from rltool.envs import make_env
from rltool.errors import ConfigError
from rltool.modules import make_policy
from rltool.run import evaluation
from rltool.run.evaluation import DEFAULT_EPISODE_STEPS, episode_cap, evaluate, play
from rltool.train import train

WARNING = (
    "rltool: warning: evaluation episodes of FakeEndless-v0 reached eval.max_episode_steps={} "
    "and were cut; raise it or give the env a time limit"
)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(errors, "_WARNED", set())


def test_the_cap_is_the_option_else_the_time_limit_else_the_default():
    cartpole = make_env(EnvConfig(id="CartPole-v1", num_envs=1))
    endless = make_env(EnvConfig(id="FakeEndless-v0", num_envs=1))
    limited = make_env(EnvConfig(id="FakeEndless-v0", num_envs=1, max_episode_steps=7))
    assert episode_cap(cartpole, None) == 500 and episode_cap(cartpole, 20) == 20
    assert episode_cap(endless, None) == DEFAULT_EPISODE_STEPS == 10_000
    assert episode_cap(limited, None) == 7
    for env in (cartpole, endless, limited):
        env.close()
    with pytest.raises(ConfigError, match="eval.max_episode_steps=0 is invalid"):
        EvalConfig(max_episode_steps=0)


@pytest.mark.parametrize(("env_id", "kind"), [("FakeEndless-v0", "mlp"), ("FakeNested-v0", "lstm")])
def test_cut_episodes_count_and_the_env_starts_a_new_one(env_id, kind, capsys, console):
    env = make_env(EnvConfig(id=env_id, num_envs=2), training=False)
    policy = make_policy(PolicyConfig(kind=kind, hidden_size=8), env.specs)
    trace: list = []
    played = play(policy, env, seed=0, episodes=5, max_episode_steps=4, trace=trace)
    assert played.lengths == [4, 4, 4, 4, 4] and played.cut == 5
    assert len(trace) == 12  # env 1's quota of 3: three episodes of 4 steps, nothing after
    if env_id == "FakeEndless-v0":  # [t, k]: reset k times, each new episode from t = 0
        assert env.vec_env.envs[1].unwrapped.k == 3 and env.vec_env.envs[0].unwrapped.k == 2
    env.close()
    warnings = [x for x in capsys.readouterr().err.splitlines() if "warning" in x]
    assert warnings == [WARNING.format(4).replace("FakeEndless-v0", env_id)]  # once, one line


def test_restart_starts_new_episodes_in_the_collector_where_asked():
    env = make_env(EnvConfig(id="FakeNested-v0", num_envs=3), training=False)
    policy = make_policy(PolicyConfig(kind="lstm", hidden_size=8), env.specs)
    c = Collector(env, policy, 3, seed=0)
    c.collect()
    c.collect()
    mask = torch.tensor([False, True, False])
    c.restart(mask, env.reset_where(mask.numpy()))
    assert c._is_init.view(-1).tolist() == [False, True, False]
    assert c._inputs["observation"]["pos"][:, 0].tolist() == [2.0, 0.0, 2.0]  # t: 0 where new
    for v in c._state.values():
        assert not v[1].any() and v[0].any()
    c.close()


def test_an_endless_env_is_evaluated_in_default_cap_steps(monkeypatch):
    monkeypatch.setattr(evaluation, "DEFAULT_EPISODE_STEPS", 300)  # 10,000: a second or more
    env = make_env(EnvConfig(id="FakeEndless-v0", num_envs=1), training=False)
    policy = make_policy(PolicyConfig(hidden_sizes=[8]), env.specs)
    stats = evaluate(policy, env, seed=0, episodes=1)
    env.close()
    assert stats["eval/episodes_cut"] == 1 and stats["eval/length_mean"] == 300
    assert stats["eval/return_mean"] == 300  # reward 1 a step, so far


def test_a_cartpole_evaluation_cuts_nothing():
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=2), training=False)
    torch.manual_seed(0)
    policy = make_policy(PolicyConfig(hidden_sizes=[8]), env.specs)
    assert evaluate(policy, env, seed=0, episodes=4)["eval/episodes_cut"] == 0
    env.close()


def test_a_tiny_run_on_an_endless_env_ends_warns_once_and_logs_the_cut(tmp_path, capsys, console):
    cfg = make_cfg(
        "env.id=FakeEndless-v0",
        "env.num_envs=2",
        "collector.frames_per_batch=32",
        "total_frames=128",
        "eval.every_frames=64",
        "eval.episodes=2",
        "eval.final_episodes=3",
        "eval.max_episode_steps=50",
        "logger.progress=none",
        "loss.epochs=1",
    )
    summary = train(cfg, tmp_path)
    rows = metric_rows(tmp_path)
    assert [r["eval/episodes_cut"] for r in rows] == ["", "2", "", "3"]
    assert summary["eval/episodes_cut"] == 3 and summary["eval/length_mean"] == 50
    assert capsys.readouterr().err.count("rltool: warning:") == 1
