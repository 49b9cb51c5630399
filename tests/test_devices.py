"""Collector devices: defaults, device vs env_device / policy_device, the conflict, devices the
machine lacks (also through the CLI), storing_device and dtypes; CUDA runs where CUDA exists.

On a CPU-only machine every device is the CPU, so these tests check the rules and the plumbing
(what is resolved, where env, policy and rollout end up, that naming the devices changes no
number); the test marked ``cuda`` checks the moves between devices themselves."""

import json

import pytest
import torch
from conftest import run_cli

from rltool import keys as K
from rltool.collectors import Collector
from rltool.collectors.devices import Devices, check_device, module_device, resolve_devices
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.envs.vector import VectorEnv
from rltool.errors import ConfigError
from rltool.modules import ActorCritic, make_policy

CPU = torch.device("cpu")


def rollouts(policy_cfg=None, env_cfg=None, batches=2, seed=0, **devices):
    """``batches`` rollouts of 4 steps, cloned, and the collector."""
    torch.manual_seed(seed)
    env = make_env(env_cfg or EnvConfig(id="CartPole-v1", num_envs=3))
    policy = make_policy(policy_cfg or PolicyConfig(), env.specs)
    c = Collector(env, policy, 4 * env.num_envs, seed=seed, **devices)
    out = [c.collect().clone() for _ in range(batches)]
    env.close()
    return out, c


def assert_same(a, b):
    for x, y in zip(a, b, strict=True):
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for k in x.keys(True, True):
            assert torch.equal(x[k].cpu(), y[k].cpu()), k


def test_nothing_given_leaves_env_and_policy_where_they_are(monkeypatch):
    assert resolve_devices() == Devices(env=None, policy=None, storing=None)
    moved = []  # every move the collector asks of the env and the policy

    def spy(cls, what):
        original = cls.to
        monkeypatch.setattr(
            cls, "to", lambda self, d: moved.append((what, str(d))) or original(self, d)
        )

    spy(VectorEnv, "env")
    spy(ActorCritic, "policy")
    _, c = rollouts()
    assert moved == []  # not even to the CPU they are on
    assert c.devices == {"env": "cpu", "policy": "cpu", "storing": "cpu"}
    assert c.storing_device == c.env_device and c.rollout.device == CPU
    rollouts(device="cpu")
    assert moved == [("env", "cpu"), ("policy", "cpu")]  # the spies see a move when one is asked


def test_device_sets_env_and_policy_together():
    d = resolve_devices(device="cpu")
    assert d.env == d.policy == CPU and d.storing is None
    d = resolve_devices(env_device="cpu", storing_device="cpu")
    assert d.env == CPU and d.policy is None and d.storing == CPU


@pytest.mark.parametrize("other", ["env_device", "policy_device"])
def test_device_with_a_specific_device_is_an_error(other):
    with pytest.raises(ConfigError, match=f"collector.device='cpu' and collector.{other}"):
        resolve_devices(device="cpu", **{other: "cpu"})
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=2))
    with pytest.raises(ConfigError, match="give either device"):
        Collector(env, make_policy(PolicyConfig(), env.specs), 4, device="cpu", **{other: "cpu"})


def fake_cuda(monkeypatch, count):
    """This machine as seen by the checks, with ``count`` CUDA devices (nothing is allocated)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_devices_the_machine_lacks_are_errors(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    fake_cuda(monkeypatch, 0)
    with pytest.raises(ConfigError, match="collector.device='cuda': this machine has no CUDA"):
        resolve_devices(device="cuda")
    fake_cuda(monkeypatch, 1)
    assert check_device("cuda", "k") == check_device("cuda:0", "k") == torch.device("cuda", 0)
    with pytest.raises(ConfigError, match=r"policy_device='cuda:3'.* 1 CUDA device\(s\), cuda:0"):
        resolve_devices(policy_device="cuda:3")
    with pytest.raises(ConfigError, match="storing_device='mps': MPS exists only on Apple"):
        resolve_devices(storing_device="mps")
    for bad in ("gpu", "cuda:x", "", "cpu:0:1"):
        with pytest.raises(ConfigError, match="is not a device: use cpu, cuda, cuda:N or mps"):
            resolve_devices(env_device=bad)
    with pytest.raises(ConfigError, match="does not run on meta devices"):
        resolve_devices(env_device="meta")


def test_missing_device_from_the_cli_is_one_line_before_any_work(tmp_path, cli):
    missing = f"cuda:{torch.cuda.device_count()}"  # one past the last GPU (cuda:0 without one)
    r = cli("train", f"collector.device={missing}", "hydra.run.dir=run", cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith(f"rltool train: error: collector.device='{missing}'")
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_train_prints_and_records_the_resolved_devices(tmp_path):
    r = run_cli(
        "train",
        "total_frames=64",
        "collector.frames_per_batch=64",
        "eval.episodes=1",
        "eval.final_episodes=1",
        "collector.device=cpu",
        "collector.storing_device=cpu",
        "hydra.run.dir=run",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    want = {"env": "cpu", "policy": "cpu", "storing": "cpu", "loss": "cpu"}
    assert json.loads((tmp_path / "run" / "devices.json").read_text()) == want
    assert "devices: env cpu, policy cpu, storing cpu, loss cpu" in r.stderr


@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_naming_the_devices_changes_no_number(kind):
    cfg = PolicyConfig(kind=kind)
    base, _ = rollouts(cfg)
    named, c = rollouts(cfg, env_device="cpu", policy_device="cpu", storing_device="cpu")
    assert_same(base, named)
    together, _ = rollouts(cfg, device="cpu", storing_device="cpu")
    assert_same(base, together)
    assert c.rollout.device == CPU
    assert all(v.device == CPU for v in c.rollout.values(True, True))


def test_storing_device_is_where_the_rollout_is_written():
    _, c = rollouts(storing_device="cpu")
    assert c.storing_device == CPU and c.rollout.device == CPU
    # the rollout is the buffer the collector writes, not a copy made on return
    assert c.collect() is c.rollout
    assert c.rollout[K.ACTION].data_ptr() == c._leaves[K.ACTION].data_ptr()


@pytest.mark.parametrize(
    "env_cfg, action_dtype",
    [
        (EnvConfig(id="CartPole-v1", num_envs=2), torch.int64),
        (EnvConfig(id="FakeCount-v0", num_envs=2, kwargs={"continuous": True}), torch.float32),
    ],
)
def test_dtypes_are_kept(env_cfg, action_dtype):
    (td,), c = rollouts(PolicyConfig(kind="lstm"), env_cfg, batches=1, storing_device="cpu")
    want = {
        K.OBSERVATION: torch.float32,
        K.IS_INIT: torch.bool,
        K.ACTION: action_dtype,
        K.SAMPLE_LOG_PROB: torch.float32,
        K.STATE_VALUE: torch.float32,
        K.RECURRENT_STATE_H: torch.float32,
        K.nxt(K.RECURRENT_STATE_C): torch.float32,
        K.nxt(K.REWARD): torch.float32,
        K.nxt(K.TERMINATED): torch.bool,
        K.nxt(K.TRUNCATED): torch.bool,
        K.nxt(K.DONE): torch.bool,
        K.nxt(K.EPISODE_LENGTH): torch.int64,
    }
    for k, dtype in want.items():
        assert td.get(k).dtype == dtype, k
    assert td[K.ACTION].dtype == c.env.specs.action.dtype


def run_on(kind, seed=0, **devices):
    """Greedy rollouts on FakeCount (observations do not depend on the actions)."""
    torch.manual_seed(seed)
    env = make_env(EnvConfig(id="FakeCount-v0", num_envs=3, max_episode_steps=4))
    policy = make_policy(PolicyConfig(kind=kind), env.specs)
    policy.explore = False  # sampling draws from each device's own generator; argmax does not
    c = Collector(env, policy, 6 * env.num_envs, seed=seed, **devices)
    out = [c.collect().clone() for _ in range(2)]
    return out, c


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["mlp", "lstm"])
@pytest.mark.parametrize(
    "devices, storing",
    [
        ({"policy_device": "cuda"}, "cpu"),  # CPU env, CUDA policy: stored on the env's device
        ({"device": "cuda", "storing_device": "cpu"}, "cpu"),
        ({"env_device": "cpu", "policy_device": "cuda", "storing_device": "cuda"}, "cuda:0"),
    ],
)
def test_cuda_policy_gives_the_cpu_numbers_on_the_storing_device(kind, devices, storing):
    ref, _ = run_on(kind)
    out, c = run_on(kind, **devices)
    assert module_device(c.policy).type == "cuda" and str(c.storing_device) == storing
    for x, y in zip(ref, out, strict=True):
        assert all(v.device == torch.device(storing) for v in y.values(True, True))
        for k in x.keys(True, True):
            a, b = x[k], y[k].cpu()
            assert a.dtype == b.dtype, k
            if a.is_floating_point():
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-5, msg=str(k))
            else:
                assert torch.equal(a, b), k
