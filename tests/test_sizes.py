"""Sizes checked before allocation (rltool/data/sizes.py): the rollout's and the replay's
estimates match what is allocated; a setting beyond the machine is a one-line ConfigError naming
it, before anything is allocated, and the CLI leaves no run folder behind."""

from __future__ import annotations

import pytest

from rltool.collectors import Collector
from rltool.config import BufferConfig, EnvConfig, PolicyConfig
from rltool.data import buffer as buffer_module
from rltool.data import make_replay
from rltool.data.buffer import PRIORITY_BYTES, step_bytes
from rltool.data.sizes import available_memory, tensor_bytes
from rltool.envs import make_env
from rltool.errors import ConfigError
from rltool.modules import make_policy

CASES = [  # (env, policy, heads): flat, nested with an image, recurrent with previous inputs
    (EnvConfig(id="CartPole-v1", num_envs=2), PolicyConfig(), ("actor", "critic")),
    (
        EnvConfig(id="FakeNested-v0", num_envs=3),
        PolicyConfig(kind="lstm", inputs=["observation", "prev_action", "prev_reward"]),
        ("actor", "critic"),
    ),
    (EnvConfig(id="FakeNested-v0", num_envs=2), PolicyConfig(kind="gru"), ("q",)),
]


def within(estimate: int, real: int) -> bool:
    return abs(estimate - real) <= 0.1 * real


@pytest.mark.parametrize(("env_cfg", "policy_cfg", "heads"), CASES)
def test_the_rollout_estimate_is_what_the_collector_allocates(env_cfg, policy_cfg, heads):
    env = make_env(env_cfg)
    policy = make_policy(policy_cfg, env.specs, heads=heads)
    c = Collector(env, policy, 8 * env.num_envs, seed=0)
    real = tensor_bytes(c.rollout.values(include_nested=True, leaves_only=True))
    assert within(c.rollout_bytes(), real)
    c.close()


@pytest.mark.parametrize(("env_cfg", "policy_cfg", "heads"), CASES)
@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_the_replay_estimate_is_what_the_buffer_allocates(
    env_cfg, policy_cfg, heads, storage, tmp_path
):
    env = make_env(env_cfg)
    policy = make_policy(policy_cfg, env.specs, heads=heads)
    c = Collector(env, policy, 4 * env.num_envs, seed=0)
    size = 40 * env.num_envs
    cfg = BufferConfig(size=size, seq_len=4, storage=storage, path=str(tmp_path / "r"))
    buf = make_replay(cfg, 1, env.num_envs, policy, 0)
    buf.extend(c.collect())
    real = tensor_bytes(buf.storage.values(include_nested=True, leaves_only=True))
    real += tensor_bytes([buf.priority])
    assert within(size * (step_bytes(policy) + PRIORITY_BYTES), real)
    c.close()


def test_a_rollout_beyond_memory_is_refused_before_allocation():
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=8))
    policy = make_policy(PolicyConfig(), env.specs)
    with pytest.raises(ConfigError) as info:
        Collector(env, policy, 1_000_000_000)  # ~70 GB: more than this machine (checked below)
    env.close()
    msg = str(info.value)
    assert msg.startswith("collector.frames_per_batch=1000000000 needs ~")
    assert "GB of memory for its rollout (1000000000 frames of " in msg
    assert msg.endswith("GB are available: lower collector.frames_per_batch")
    need = float(msg.split("~")[1].split(" GB")[0])
    assert need * 1e9 > available_memory()


def test_a_replay_beyond_memory_or_disk_is_refused(monkeypatch, tmp_path):
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=2))
    policy = make_policy(PolicyConfig(), env.specs, heads=("q",))
    env.close()
    size, per = 10**12, step_bytes(policy) + PRIORITY_BYTES
    with pytest.raises(ConfigError) as info:
        make_replay(BufferConfig(size=size), 1, 2, policy, 0)
    assert str(info.value).startswith(
        f"buffer.size={size} needs ~{size * per / 1e9:.1f} GB of memory for its replay "
        f"({size} transitions of {per - PRIORITY_BYTES} bytes); "
    )
    assert str(info.value).endswith("lower buffer.size or use buffer.storage=memmap")
    monkeypatch.setattr(buffer_module, "free_disk", lambda path: 10**6)
    cfg = BufferConfig(size=10**6, storage="memmap", path=str(tmp_path / "replay"))
    with pytest.raises(ConfigError, match=r"GB of disk at .*replay .*set buffer.path"):
        make_replay(cfg, 1, 2, policy, 0)


@pytest.mark.parametrize(
    "args",
    [["loss=dqn", "buffer.size=1000000000000"], ["collector.frames_per_batch=1000000000"]],
)
def test_the_cli_refuses_in_one_line_and_leaves_no_run_folder(args, tmp_path, cli):
    run = tmp_path / "run"
    r = cli("train", *args, f"hydra.run.dir={run}", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and args[-1] in lines[0] and "GB are available" in lines[0]
    assert not run.exists()
