"""The env layer: autoreset, final observations, is_init, flags kept apart, spaces, seeding."""

import dataclasses
import math

import numpy as np
import pytest
import torch

from rltool import keys as K
from rltool.config import EnvConfig
from rltool.envs import make_env
from rltool.envs.normalize import RewardScaler, RunningMeanStd
from rltool.errors import ConfigError


def fake(num_envs=2, backend="sync", **kwargs):
    cfg = EnvConfig(
        id="FakeCount-v0",
        num_envs=num_envs,
        backend=backend,
        kwargs=kwargs.pop("kwargs", {}),
        **kwargs,
    )
    return make_env(cfg)


def act(env, a=0):
    return {K.ACTION: torch.full((env.num_envs,), a, dtype=torch.int64)}


@pytest.mark.parametrize("backend", ["sync", "async"])
def test_termination_final_observation_and_reset(backend):
    env = fake(backend=backend, kwargs={"terminate_at": 3})
    root = env.reset(seed=0)
    assert root[K.IS_INIT].all() and (root[K.OBSERVATION] == torch.tensor([0.0, 0.0])).all()
    from tensordict import TensorDict

    for t in range(1, 4):
        td = TensorDict(act(env, 1), [2])
        td, root = env.step_and_maybe_reset(td)
        nxt = td[K.NEXT]
        assert (nxt[K.REWARD] == 2.0).all()
        if t < 3:
            assert not nxt[K.DONE].any() and not root[K.IS_INIT].any()
            assert (nxt[K.OBSERVATION] == root[K.OBSERVATION]).all()
    # the last step of the episode: the true final observation under "next", the reset at the root
    assert nxt[K.TERMINATED].all() and not nxt[K.TRUNCATED].any() and nxt[K.DONE].all()
    assert (nxt[K.OBSERVATION] == torch.tensor([3.0, 0.0])).all()
    assert (root[K.OBSERVATION] == torch.tensor([0.0, 1.0])).all() and root[K.IS_INIT].all()
    assert (nxt[K.EPISODE_RETURN] == 6.0).all() and (nxt[K.EPISODE_LENGTH] == 3).all()
    env.close()


def test_truncation_is_not_termination():
    env = fake(max_episode_steps=2)
    env.reset(seed=0)
    env.step_tensors(torch.zeros(2, dtype=torch.int64))
    r = env.step_tensors(torch.zeros(2, dtype=torch.int64))
    assert r.truncated.all() and not r.terminated.any() and r.done.all()
    assert (r.next_observation == torch.tensor([2.0, 0.0])).all()
    assert (r.observation == torch.tensor([0.0, 1.0])).all()


def test_root_and_next_observation_differ_only_at_episode_ends():
    env = fake(num_envs=3, kwargs={"terminate_at": 2})
    env.reset(seed=0)
    r1 = env.step_tensors(torch.zeros(3, dtype=torch.int64))
    r2 = env.step_tensors(torch.zeros(3, dtype=torch.int64))
    assert not r1.done.any() and r2.done.all()
    assert torch.equal(r1.observation, r1.next_observation)
    assert not torch.equal(r2.observation, r2.next_observation)


def test_discrete_observation_is_one_hot():
    env = make_env(EnvConfig(id="FakeDiscreteObs-v0", num_envs=2))
    assert env.specs.observation.shape == (3,)
    obs = env.reset_tensors(seed=0)
    assert torch.equal(obs, torch.tensor([[1.0, 0, 0], [1.0, 0, 0]]))
    r = env.step_tensors(torch.zeros(2, dtype=torch.int64))
    assert torch.equal(r.observation, torch.tensor([[0.0, 1, 0], [0.0, 1, 0]]))


def test_unsupported_observation_entry_names_it_and_the_fix():
    with pytest.raises(ConfigError, match="entry 'seq' is Sequence.*env.obs_keys"):
        make_env(EnvConfig(id="FakeSequenceObs-v0", num_envs=1))
    env = make_env(EnvConfig(id="FakeSequenceObs-v0", num_envs=1, obs_keys=["a"]))
    assert list(env.specs.observation.entries) == ["a"]


def test_unknown_env_id_is_a_config_error():
    with pytest.raises(ConfigError, match="NotAnEnv-v0"):
        make_env(EnvConfig(id="NotAnEnv-v0", num_envs=1))


def test_obs_keep_masks_cartpole_velocities():
    full = make_env(EnvConfig(id="CartPole-v1", num_envs=2))
    masked = make_env(EnvConfig(id="CartPole-v1", num_envs=2, obs_keep=[0, 2]))
    a, b = full.reset_tensors(seed=5), masked.reset_tensors(seed=5)
    assert masked.specs.observation.shape == (2,)
    assert torch.equal(b, a[:, [0, 2]])
    with pytest.raises(ConfigError, match="obs_keep"):
        make_env(EnvConfig(id="CartPole-v1", num_envs=1, obs_keep=[7]))


def test_same_seed_same_numbers():
    def rollout():
        env = make_env(EnvConfig(id="CartPole-v1", num_envs=3))
        obs = [env.reset_tensors(seed=11)]
        for i in range(30):
            obs.append(env.step_tensors(torch.tensor([i % 2, 1, 0])).next_observation)
        return torch.stack(obs)

    assert torch.equal(rollout(), rollout())


def test_normalisation_updates_in_training_and_is_frozen_in_eval():
    cfg = EnvConfig(id="FakeCount-v0", num_envs=2, normalize_obs=True, normalize_reward=True)
    env = make_env(cfg)
    ev = make_env(cfg, obs_norm=env.obs_norm, training=False)
    assert ev.obs_norm is env.obs_norm and ev.reward_scaler is None
    env.reset_tensors(seed=0)
    for _ in range(5):
        env.step_tensors(torch.zeros(2, dtype=torch.int64))
    before = env.obs_norm.state_dict()
    assert before["count"] > 10  # 1 reset + 5 steps of 2 envs
    ev.reset_tensors(seed=0)
    r = ev.step_tensors(torch.zeros(2, dtype=torch.int64))
    after = env.obs_norm.state_dict()
    assert all(torch.equal(after[k], before[k]) for k in ("count", "mean", "var"))
    expected = (torch.tensor([1.0, 0.0]).double() - before["mean"]) / (before["var"] + 1e-8).sqrt()
    assert torch.allclose(r.observation[0].double(), expected.clamp(-10, 10), atol=1e-5)
    assert torch.equal(r.reward, torch.ones(2, 1))  # the eval env's rewards are raw


def test_continuous_actions_are_clipped_for_the_env_only():
    env = make_env(EnvConfig(id="FakeCount-v0", num_envs=1, kwargs={"continuous": True}))
    env.reset_tensors(seed=0)
    r = env.step_tensors(torch.tensor([[5.0]]))
    assert r.reward.item() == 2.0  # 1 + clip(5, -1, 1)


def test_running_stats_over_chunks_equal_the_stats_of_all_samples():
    rng = np.random.default_rng(0)
    data = rng.normal(3.0, 2.0, size=(100, 3))
    stats = RunningMeanStd((3,))
    for chunk in np.split(data, [7, 8, 40, 99]):  # uneven chunks, one of a single row
        stats.update(chunk)
    # the prior (mean 0, var 1, count 1e-4) weighs 1e-6 of the result
    np.testing.assert_allclose(stats.mean, data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.var, data.var(0), rtol=1e-5)
    restored = RunningMeanStd((3,))
    restored.load_state_dict(stats.state_dict())
    assert restored.count == stats.count and np.array_equal(restored.var, stats.var)


def test_reward_scaler_divides_by_the_std_of_the_discounted_return():
    scaler = RewardScaler(num_envs=2, gamma=0.5)
    done = torch.tensor([False, True])
    out = scaler(torch.tensor([1.0, 2.0]), done)
    # returns after the step: [1, 2] (env 1's is then zeroed); their var (with the prior) ~0.25
    var = scaler.stats.var
    assert var == pytest.approx(0.25, rel=1e-3) and scaler.ret.tolist() == [1.0, 0.0]
    assert torch.allclose(out, torch.tensor([1.0, 2.0]) / math.sqrt(var + 1e-8))
    scaler(torch.tensor([1.0, 1.0]), torch.tensor([False, False]))
    assert scaler.ret.tolist() == [1.5, 1.0]  # 0.5 * 1 + 1, and a fresh episode's 1
    saved = scaler.state_dict()
    scaler.reset_returns()
    assert not scaler.ret.any()
    scaler.load_state_dict(saved)
    assert scaler.ret.tolist() == [1.5, 1.0]


def test_observation_statistics_freeze_after_normalize_obs_frames():
    """The statistics learn from the first batches whose total reaches normalize_obs_frames (the
    reset's 2 observations, then 2 per step), then stay fixed: later observations are scaled by
    them, not learned from."""
    cfg = EnvConfig(id="FakeCount-v0", num_envs=2, normalize_obs=True, normalize_obs_frames=6)
    env = make_env(cfg)
    env.reset_tensors(seed=0)
    counts = []
    for _ in range(5):
        env.step_tensors(torch.zeros(2, dtype=torch.int64))
        counts.append(round(float(env.obs_norm.state_dict()["count"])))
    assert counts == [4, 6, 6, 6, 6]
    frozen = env.obs_norm.state_dict()
    env.step_tensors(torch.zeros(2, dtype=torch.int64))
    assert all(torch.equal(env.obs_norm.state_dict()[k], frozen[k]) for k in ("mean", "var"))
    unbounded = make_env(dataclasses.replace(cfg, normalize_obs_frames=None))
    unbounded.reset_tensors(seed=0)
    for _ in range(6):
        unbounded.step_tensors(torch.zeros(2, dtype=torch.int64))
    assert float(unbounded.obs_norm.state_dict()["count"]) > 14  # null: always learning
    with pytest.raises(ConfigError, match="env.normalize_obs_frames"):
        EnvConfig(id="FakeCount-v0", normalize_obs_frames=0)
