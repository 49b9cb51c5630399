"""rltool's passive T-maze (rltool/envs/tmaze.py): its dynamics by hand, seeding, the state
protocol, gymnasium's env checker, an oracle against memoryless policies, and env=tmaze."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import make_cfg, metric_rows
from gymnasium.utils.env_checker import check_env

from rltool.cli import main
from rltool.envs import make_env
from rltool.envs.tmaze import ENV_ID, LEFT, RIGHT, TMazeEnv
from rltool.errors import ConfigError


def seed_with_cue(cue: int, length: int = 4) -> int:
    """The first reset seed whose episode shows ``cue``."""
    env = TMazeEnv(length)
    return next(s for s in range(100) if env.reset(seed=s)[0][0] == cue)


def play(env: TMazeEnv, policy, seed: int) -> tuple[list, list, list]:
    """One episode: its observations (the first included), rewards and (terminated, truncated)."""
    obs, _ = env.reset(seed=seed)
    observations, rewards, flags = [obs], [], []
    first = obs
    done = False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(first, obs))
        observations.append(obs)
        rewards.append(reward)
        flags.append((terminated, truncated))
        done = terminated or truncated
    return observations, rewards, flags


def always(action):
    return lambda first, obs: action


def oracle(first, obs):
    return RIGHT if first[0] > 0 else LEFT


@pytest.mark.parametrize(
    ("cue", "action", "reward"),
    [(1, RIGHT, 1.0), (1, LEFT, -1.0), (-1, LEFT, 1.0), (-1, RIGHT, -1.0)],
)
def test_the_junction_rewards_the_cued_side(cue, action, reward):
    env = TMazeEnv(4)
    _, rewards, _ = play(env, always(action), seed_with_cue(cue))
    assert rewards == [0.0] * 4 + [reward]


@pytest.mark.parametrize("length", [1, 3, 20])
def test_an_episode_is_length_plus_one_steps_and_terminates_at_the_junction(length):
    for seed in range(4):
        _, rewards, flags = play(TMazeEnv(length), always(LEFT), seed)
        assert len(rewards) == length + 1
        assert flags == [(False, False)] * length + [(True, False)]  # never truncated


def test_the_cue_is_in_the_first_observation_only():
    length = 5
    for cue in (1, -1):
        observations, _, _ = play(TMazeEnv(length), always(RIGHT), seed_with_cue(cue, length))
        got = np.stack(observations[: length + 1])
        assert got.dtype == np.float32
        assert got[:, 0].tolist() == [cue] + [0] * length
        assert np.allclose(got[:, 1], np.arange(length + 1) / length)
        assert got[:, 2].tolist() == [0] * length + [1]


def test_the_junction_looks_the_same_for_both_cues():
    """What a memoryless policy sees after the first step does not depend on the cue."""
    runs = [play(TMazeEnv(6), always(LEFT), seed_with_cue(c, 6))[0] for c in (1, -1)]
    for a, b in zip(runs[0][1:], runs[1][1:], strict=True):
        assert np.array_equal(a, b)


def test_seeding_is_deterministic_and_draws_both_cues():
    cues = [[TMazeEnv(3).reset(seed=s)[0][0] for s in range(40)] for _ in range(2)]
    assert cues[0] == cues[1] and set(cues[0]) == {1.0, -1.0}
    env, again = TMazeEnv(3), TMazeEnv(3)
    env.reset(seed=7)
    again.reset(seed=7)
    later = [env.reset()[0][0] for _ in range(20)]  # unseeded resets go on from the seed
    assert later == [again.reset()[0][0] for _ in range(20)]


def test_an_oracle_scores_one_and_memoryless_policies_zero_on_average():
    env = TMazeEnv(10)
    mean = {}
    for name, policy in {"oracle": oracle, "left": always(LEFT), "right": always(RIGHT)}.items():
        mean[name] = np.mean([sum(play(env, policy, seed)[1]) for seed in range(400)])
    assert mean["oracle"] == 1.0
    assert abs(mean["left"]) < 0.15 and mean["left"] == -mean["right"]


def test_gymnasiums_env_checker_passes():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a checker's warning fails the test
        check_env(TMazeEnv(5), skip_render_check=True)
        check_env(gym.make(f"rltool.envs.tmaze:{ENV_ID}", length=3).unwrapped)


@pytest.mark.parametrize("length", [0, -2, 2.5])
def test_a_bad_length_is_refused(length):
    with pytest.raises(ValueError, match="integer length >= 1"):
        TMazeEnv(length)


def test_env_tmaze_takes_its_length_from_env_kwargs():
    cfg = make_cfg("env=tmaze", "env.kwargs.length=7").env
    assert cfg.kwargs == {"length": 7} and make_cfg("env=tmaze").env.kwargs == {"length": 20}
    env = make_env(cfg, num_envs=2)
    obs = env.reset_tensors(seed=0)  # [env, 3]: the cue, the position, the junction flag
    assert obs.shape == (2, 3) and obs[:, 0].abs().tolist() == [1.0, 1.0]
    for _ in range(7):
        obs = env.step_tensors(torch.zeros(2, dtype=torch.long))[0]
    assert obs[:, 1:].tolist() == [[1.0, 1.0]] * 2  # at the junction after 7 steps
    env.close()


def test_a_bad_length_from_the_config_is_bad_input():
    cfg = make_cfg("env=tmaze", "env.kwargs.length=0").env
    with pytest.raises(ConfigError, match="length=0: the corridor needs an integer length >= 1"):
        make_env(cfg, num_envs=1)


def test_a_restored_vector_env_continues_exactly():
    cfg = make_cfg("env=tmaze", "env.kwargs.length=6", "env.num_envs=4").env
    g = torch.Generator().manual_seed(0)
    actions = [torch.randint(2, (4,), generator=g) for _ in range(40)]
    env = make_env(cfg)
    env.reset_tensors(seed=3)
    for a in actions[:4]:
        env.step_tensors(a)
    state = env.get_state()
    expected = [tuple(t.clone() for t in env.step_tensors(a)) for a in actions[4:]]
    fresh = make_env(cfg)
    fresh.reset_tensors(seed=99)
    fresh.set_state(state)
    for want, a in zip(expected, actions[4:], strict=True):
        got = fresh.step_tensors(a)
        assert all(torch.equal(x, y) for x, y in zip(want, got, strict=True))


def test_a_gru_trains_on_env_tmaze(tmp_path):
    args = [
        "train",
        "env=tmaze",
        "env.kwargs.length=5",
        "policy=gru",
        "policy.hidden_size=8",
        "env.num_envs=2",
        "collector.frames_per_batch=64",
        "total_frames=128",
        "eval.every_frames=128",
        "eval.episodes=2",
        "eval.final_episodes=2",
        "logger.progress=none",
        f"hydra.run.dir={tmp_path}",
    ]
    assert main(args) == 0
    last = metric_rows(tmp_path)[-1]
    assert last["frames"] == "128" and float(last["eval/return_mean"]) in (-1.0, 0.0, 1.0)
