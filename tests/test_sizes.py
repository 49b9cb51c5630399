"""Sizes checked before allocation (rltool/data/sizes.py): the rollout's and the replay's
estimates match what is allocated; a setting beyond the machine is a one-line ConfigError naming
it, before anything is allocated, and the CLI leaves no run folder behind."""

from __future__ import annotations

import pytest
import torch

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


# ---- every place observations take memory (rltool/run/footprint.py) ----
HUGE_IMAGE = (1024, 1024, 3)  # uint8: 3 MB a frame


def _register_huge():
    """FakeHugeImage-v0: a 1024 x 1024 RGB image space, never reset or stepped (the size check
    must refuse the run before a frame is made)."""
    import gymnasium as gym
    import numpy as np

    class Huge(gym.Env):
        observation_space = gym.spaces.Box(0, 255, HUGE_IMAGE, np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            raise AssertionError("reset before the size check")

        def step(self, action):
            raise AssertionError("step before the size check")

    if "FakeHugeImage-v0" not in gym.registry:
        gym.register("FakeHugeImage-v0", entry_point=lambda **kw: Huge())


HUGE_ARGS = ["env.id=FakeHugeImage-v0", "env.num_envs=16", "collector.frames_per_batch=2048"]


def test_the_footprint_counts_every_place_observations_take():
    from conftest import make_cfg

    from rltool.run.footprint import terms
    from rltool.specs import IMAGE, Spec

    _register_huge()
    cfg = make_cfg(*HUGE_ARGS, "env.normalize_obs=false")
    spec = Spec(HUGE_IMAGE, torch.uint8, kind=IMAGE, layout="hwc")
    t = terms(cfg, spec)
    frame = 1024 * 1024 * 3
    assert t["the rollout"] == (2 * 2048 * frame, "collector.frames_per_batch")
    assert t["the vector env's buffers"] == (16 * frame, "env.num_envs")
    assert t["the eval collector"][1] == "eval.episodes"
    forward, key = t["a minibatch's forward"]
    assert key == "loss.num_minibatches" and forward > 2048 * frame * 4  # float input
    assert "observation normalisation" not in t and "the replay" not in t


def test_huge_image_observations_are_refused_in_one_line_before_allocation(tmp_path, capsys):
    from rltool.cli import main

    _register_huge()
    run = tmp_path / "run"
    rc = main(["train", *HUGE_ARGS, "logger.progress=none", f"hydra.run.dir={run}"])
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert err.count("\n") == 0
    assert err.startswith("rltool train: error: loss.num_minibatches=1: the observations ")
    # the image encoder's feature maps over a 2,048-frame minibatch: ~70 GB
    assert "The largest part is a minibatch's forward (~" in err
    assert err.endswith("GB): raise loss.num_minibatches")
    assert not run.exists()


@pytest.mark.parametrize(("shape", "cnn"), [((64, 64, 3), "auto"), ((7, 7, 3), "small")])
def test_the_image_encoder_size_is_its_real_parameter_count(shape, cnn):
    from rltool.modules.encoders import ImageEncoder, image_encoder_size
    from rltool.specs import IMAGE, Spec

    spec = Spec(shape, torch.uint8, kind=IMAGE, layout="hwc")
    cfg = PolicyConfig(cnn=cnn)
    real = sum(p.numel() for p in ImageEncoder(spec, cfg, "image").parameters())
    assert image_encoder_size(spec, cfg)[1] == real
