"""One contract for every env backend (sync, async, envpool), checked on CartPole by its physics;
threads: num_threads sets torch's, async workers run one thread each.

envpool is in the list wherever its wheels exist (Linux x86_64, Python >= 3.11), the platforms
on which the ``dev`` extra installs it: there, a missing envpool fails this test, never skips it.
"""

import os
import platform
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import make_cfg

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.errors import ConfigError
from rltool.modules import make_policy

ENVPOOL_PLATFORM = (
    sys.platform == "linux" and platform.machine() == "x86_64" and sys.version_info >= (3, 11)
)
BACKENDS = ["sync", "async", *(["envpool"] if ENVPOOL_PLATFORM else [])]
X_LIMIT, THETA_LIMIT = 2.4, 12 * 2 * np.pi / 360  # CartPole terminates past these


def cartpole(backend, num_envs=4, **kwargs):
    return make_env(EnvConfig(id="CartPole-v1", num_envs=num_envs, backend=backend, **kwargs))


def out_of_bounds(obs):
    return (obs[:, 0].abs() > X_LIMIT) | (obs[:, 2].abs() > THETA_LIMIT)


def is_reset(obs):
    return (obs.abs() <= 0.05).all(-1)  # CartPole resets uniformly in [-0.05, 0.05]


@pytest.mark.parametrize("backend", BACKENDS)
def test_step_result_contract(backend):
    env = cartpole(backend)
    B = env.num_envs
    obs = env.reset_tensors(seed=0)
    assert obs.shape == (B, 4) and obs.dtype == torch.float32 and is_reset(obs).all()
    steps, terminated_seen = torch.zeros(B, dtype=torch.int64), 0
    for _ in range(60):  # always pushing right: every pole falls within ~10 steps
        r = env.step_tensors(torch.ones(B, dtype=torch.int64))
        for x, dtype in zip(
            r,
            [torch.float32] * 3 + [torch.bool] * 3 + [torch.float32, torch.int64],
            strict=True,
        ):
            assert x.dtype == dtype and x.shape[0] == B and x.device == env.device
        assert r.reward.shape == r.done.shape == r.episode_length.shape == (B, 1)
        assert torch.equal(r.done, r.terminated | r.truncated)
        assert not r.truncated.any()  # 60 steps < 500
        steps += 1
        done = r.done[:, 0]
        assert torch.equal(r.reward, torch.ones(B, 1))
        # the step's own observation where it goes on; where it ended, the final observation
        # (the pole is out of bounds) and a fresh reset observation for the next step
        assert torch.equal(r.next_observation[~done], r.observation[~done])
        assert out_of_bounds(r.next_observation)[done].all()
        assert not out_of_bounds(r.next_observation)[~done].any()
        assert is_reset(r.observation[done]).all()
        # episode statistics: the length of the episode that ended, its return (1 per step)
        assert torch.equal(r.episode_length[:, 0], steps)
        assert torch.equal(r.episode_return[:, 0], steps.float())
        steps[done] = 0
        terminated_seen += int(done.sum())
    assert terminated_seen >= 2 * B
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_truncation_keeps_the_final_observation(backend):
    env = cartpole(backend, num_envs=2, max_episode_steps=5)
    env.reset_tensors(seed=1)
    for t in range(5):  # alternating pushes keep the pole up for 5 steps
        r = env.step_tensors(torch.tensor([t % 2, 1 - t % 2]))
    assert r.truncated.all() and not r.terminated.any() and r.done.all()
    assert is_reset(r.observation).all() and not torch.equal(r.next_observation, r.observation)
    assert (r.next_observation[:, 1].abs() > 0.05).any()  # it moved: not a reset observation
    assert torch.equal(r.episode_length, torch.full((2, 1), 5))
    env.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_seeding_is_reproducible(backend):
    def trajectory(seed):
        env = cartpole(backend, num_envs=2)
        obs = [env.reset_tensors(seed=seed)]
        obs += [env.step_tensors(torch.tensor([t % 2, 1])).observation for t in range(15)]
        env.close()
        return torch.stack(obs)

    a = trajectory(3)
    assert torch.equal(a, trajectory(3)) and not torch.equal(a, trajectory(4))
    assert not torch.equal(a[0, 0], a[0, 1])  # each env of the pool is seeded differently


@pytest.mark.parametrize("backend", BACKENDS)
def test_collector_rollouts_never_cross_an_episode(backend):
    torch.manual_seed(0)
    env = cartpole(backend, num_envs=3)
    c = Collector(env, make_policy(PolicyConfig(kind="lstm"), env.specs), 3 * 30, seed=0)
    td = c.collect()
    obs, nxt, done = td[K.OBSERVATION], td[K.NEXT, K.OBSERVATION], td[K.NEXT, K.DONE][..., 0]
    assert done.any()
    assert torch.equal(td[K.IS_INIT][1:, :, 0], done[:-1])
    assert torch.equal(nxt[:-1][~done[:-1]], obs[1:][~done[:-1]])
    assert out_of_bounds(nxt[done]).all() and is_reset(obs[1:][done[:-1]]).all()
    # the stored state of a row that starts an episode is zero
    assert (td[K.RECURRENT_STATE_H][td[K.IS_INIT][..., 0]] == 0).all()
    env.close()


def test_envpool_refuses_an_env_it_does_not_have():
    if not ENVPOOL_PLATFORM:  # the test is about envpool's list; without envpool: its message
        with pytest.raises(ConfigError, match="needs the envpool package"):
            cartpole("envpool")
        return
    with pytest.raises(ConfigError, match="env.backend=envpool has no env 'FakeCount-v0'"):
        make_env(EnvConfig(id="FakeCount-v0", num_envs=2, backend="envpool"))
    with pytest.raises(ConfigError, match="failed to build 'CartPole-v1'.*check env.kwargs"):
        make_env(EnvConfig(id="CartPole-v1", num_envs=2, backend="envpool", kwargs={"nope": 1}))


class ThreadProbe(gym.Env):
    """Observes the threads of the process it runs in: torch's, and OMP_NUM_THREADS."""

    observation_space = gym.spaces.Box(-1, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def _obs(self):
        omp = float(os.environ.get("OMP_NUM_THREADS", "-1"))
        return np.array([torch.get_num_threads(), omp], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        return self._obs(), 0.0, False, False, {}


def test_async_workers_run_one_thread_and_leave_the_main_process_alone(monkeypatch):
    if "ThreadProbe-v0" not in gym.registry:
        gym.register("ThreadProbe-v0", entry_point=ThreadProbe)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    torch.set_num_threads(2)
    env = make_env(EnvConfig(id="ThreadProbe-v0", num_envs=2, backend="async"))
    obs = env.reset_tensors(seed=0)
    assert torch.equal(obs, torch.ones(2, 2))  # each worker: 1 torch thread, OMP_NUM_THREADS=1
    assert torch.equal(env.step_tensors(torch.zeros(2, dtype=torch.int64)).observation, obs)
    env.close()
    assert torch.get_num_threads() == 2 and "OMP_NUM_THREADS" not in os.environ
    sync = make_env(EnvConfig(id="ThreadProbe-v0", num_envs=1, backend="sync"))
    assert sync.reset_tensors(seed=0)[0, 0] == 2  # a sync env runs in the main process


def test_num_threads_sets_torchs_intra_op_threads():
    from rltool.train import build

    run = build(make_cfg("num_threads=2", "env.num_envs=2", "eval.episodes=1"))
    assert torch.get_num_threads() == 2
    run.collector.close(), run.eval_env.close()
