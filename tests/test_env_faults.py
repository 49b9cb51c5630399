"""Faults of the user's env are the env's: an EnvError (exit 4) of one line naming the env, the
vector index, the step and what was wrong (rltool/envs/faults.py), the original exception kept as
the cause; the latest checkpoint survives a run whose env breaks."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch
from conftest import cli_env, make_cfg

import rltool
from rltool.config import EnvConfig
from rltool.envs import make_env
from rltool.envs.faults import AUTO_STEPS, off_space
from rltool.errors import EXIT_ENV, ConfigError, EnvError
from rltool.run import checkpoint as ckpt
from rltool.train import train

FAULTS = [  # (env id, kwargs, the message after "env <id>, env <i>, step 5: ")
    ("FakeBoom-v0", {}, "step() raised RuntimeError: boom"),
    ("FakeNanReward-v0", {}, "reward is nan"),
    ("FakeInfObs-v0", {}, "observation[1] is inf"),
    ("FakeInfDictObs-v0", {}, 'observation entry "position"[1] is inf'),
    ("FakeShapeChange-v0", {}, "observation has shape (3,), the space declares (2,)"),
    ("FakeShapeChange-v0", {"dict_obs": True}, 'observation entry "position" has shape (3,)'),
    ("FakeOffBounds-v0", {}, "observation[0] = 2e+06 is outside the declared bounds"),
]


def steps(env, n: int) -> None:
    env.reset_tensors(seed=0)
    for _ in range(n):
        env.step_tensors(torch.zeros(env.num_envs, dtype=torch.int64))


@pytest.mark.parametrize(("env_id", "kwargs", "what"), FAULTS)
def test_a_fault_names_the_env_the_index_the_step_and_what(env_id, kwargs, what):
    env = make_env(EnvConfig(id=env_id, num_envs=4, kwargs={**kwargs, "only_seed": 2}))
    with pytest.raises(EnvError) as info:
        steps(env, 10)
    env.close()
    msg = str(info.value)
    assert msg.startswith(f"env {env_id}, env 2, step 5: {what}") and "\n" not in msg
    assert info.value.exit_code == EXIT_ENV == 4
    assert not isinstance(info.value, ConfigError)  # not bad input: its own exit status


def test_the_original_exception_is_the_cause():
    env = make_env(EnvConfig(id="FakeBoom-v0", num_envs=2))
    with pytest.raises(EnvError) as info:
        steps(env, 10)
    env.close()
    assert type(info.value.__cause__) is RuntimeError and str(info.value.__cause__) == "boom"


@pytest.mark.parametrize("env_id", ["FakeBoom-v0", "FakeShapeChange-v0", "FakeNanReward-v0"])
def test_async_workers_faults_name_the_worker_and_print_nothing(env_id, capfd):
    env = make_env(EnvConfig(id=env_id, num_envs=3, kwargs={"only_seed": 1}), backend="async")
    with pytest.raises(EnvError, match=rf"^env {env_id}, env 1, step 5: ") as info:
        steps(env, 10)
    env.close()
    assert capfd.readouterr().err == ""  # gymnasium's worker traceback: a note of the cause
    if env_id == "FakeBoom-v0":
        assert "boom" in info.value.__cause__.__notes__[0]


@pytest.mark.parametrize(
    ("fault", "how"),
    [
        ("exit", "exited with code 3"),
        ("kill", r"was killed by signal 9 \(SIGKILL, as the out-of-memory killer does\)"),
        ("segv", r"was killed by signal 11 \(SIGSEGV, a crash\)"),
    ],
)
def test_an_async_worker_that_dies_is_the_envs_fault(fault, how, capfd):
    cfg = EnvConfig(id="FakeBoom-v0", num_envs=3, kwargs={"fault": fault, "only_seed": 1})
    env = make_env(cfg, backend="async")
    with pytest.raises(
        EnvError, match=rf"^env FakeBoom-v0, env 1, step 5: its worker process {how}"
    ):
        steps(env, 10)
    procs = env.vec_env.processes
    env.close()  # at once, and nothing from __del__ later
    del env
    assert all(p.exitcode is not None for p in procs)  # none left behind
    assert capfd.readouterr().err == ""


@pytest.mark.parametrize("backend", ["async", "sync"])
def test_a_step_that_hangs_past_env_step_timeout_s_is_the_envs_fault(backend):
    cfg = EnvConfig(
        id="FakeBoom-v0", num_envs=2, kwargs={"fault": "hang", "only_seed": 1}, step_timeout_s=1
    )
    if backend == "sync":  # the watchdog ends the process (the main thread is stuck): a child
        code = "import fake_envs, test_env_faults as t; t.hang_sync()"
        done = subprocess.run(
            [sys.executable, "-c", code], env=cli_env(), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == EXIT_ENV, done.stderr
        what = (
            "env FakeBoom-v0, env 1, step 5: step() did not return within 1 s (env.step_timeout_s)"
        )
        assert done.stderr.strip() == f"rltool: error: {what}"
        return
    env = make_env(cfg, backend="async")
    with pytest.raises(EnvError, match=r"^env FakeBoom-v0, env 1, step 5: step\(\) did not return"):
        steps(env, 10)
    procs = env.vec_env.processes
    env.close()
    assert all(p.exitcode is not None for p in procs)


def hang_sync() -> None:
    cfg = EnvConfig(
        id="FakeBoom-v0", num_envs=2, kwargs={"fault": "hang", "only_seed": 1}, step_timeout_s=1
    )
    steps(make_env(cfg), 10)


def test_env_step_timeout_s_is_validated():
    with pytest.raises(ConfigError, match="env.step_timeout_s"):
        EnvConfig(step_timeout_s=0)


def test_a_fault_in_reset_says_reset():
    env = make_env(EnvConfig(id="FakeBoom-v0", num_envs=2))
    env.guard.vec_env.envs[1].unwrapped.reset = lambda **kw: 1 / 0
    with pytest.raises(EnvError, match=r"^env FakeBoom-v0, env 1, step 0: reset\(\) raised Zero"):
        env.reset_tensors(seed=0)
    env.close()


@pytest.mark.parametrize(
    ("check", "at", "caught"),
    [("auto", 5, True), ("auto", AUTO_STEPS + 5, False), ("always", AUTO_STEPS + 5, True)]
    + [("never", 5, False)],
)
def test_env_check_decides_when_the_space_is_checked(check, at, caught):
    env = make_env(EnvConfig(id="FakeOffBounds-v0", num_envs=2, kwargs={"at": at}, check=check))
    if caught:
        with pytest.raises(EnvError, match=rf"step {at}: .*env.check=never skips"):
            steps(env, at + 1)
    else:
        steps(env, at + 1)
    env.close()


def test_nan_is_caught_whatever_env_check_says():
    env = make_env(EnvConfig(id="FakeNanReward-v0", num_envs=2, check="never"))
    with pytest.raises(EnvError, match="reward is nan"):
        steps(env, 10)
    env.close()


def test_env_check_is_validated():
    with pytest.raises(ConfigError, match="env.check='sometimes' is invalid"):
        EnvConfig(check="sometimes")


def test_off_space_says_what_is_wrong():
    import gymnasium as gym
    import numpy as np

    box = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    assert off_space(box, np.array([0.5, 0.5], np.float32)) is None
    assert off_space(box, np.array([0.5, np.nan], np.float32)) == "observation[1] is nan"
    assert off_space(gym.spaces.Discrete(3), np.int64(7)).startswith("observation 7 is not in")
    tup = gym.spaces.Tuple((gym.spaces.Discrete(2), box))
    assert off_space(tup, (1, np.zeros(3, np.float32))).startswith('observation entry "1" has')


def test_the_checkpoint_before_an_env_fault_stays_and_loads(tmp_path):
    cfg = make_cfg(
        "env.id=FakeBoom-v0",
        "+env.kwargs.at=40",
        "+env.kwargs.only_seed=1",
        "env.num_envs=2",
        "collector.frames_per_batch=16",
        "checkpoint.every_frames=16",
        "eval.every_frames=100000",
        "total_frames=1000",
        "logger.progress=none",
        "loss.epochs=1",
    )
    with pytest.raises(EnvError, match=r"^env FakeBoom-v0, env 1, step 40: step\(\) raised"):
        train(cfg, tmp_path)
    latest = ckpt.latest(tmp_path / "checkpoints")
    assert int(re.search(r"(\d+)", latest.name).group(1)) == 64  # 5 batches of 16 frames: 80
    policy, state = rltool.load_policy(tmp_path)
    assert policy is not None and state is not None
