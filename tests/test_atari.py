"""env=atari: gymnasium's AtariPreprocessing, uint8 frames through the Nature CNN, single frames
for a memory policy and 4 stacked for mlp; a smoke run of policy=lstm."""

from __future__ import annotations

import pytest
import torch
from conftest import make_cfg, metric_rows

from rltool.cli import main
from rltool.config import EnvConfig
from rltool.envs import make_env
from rltool.envs.factory import resolve_id
from rltool.errors import ConfigError
from rltool.modules import make_policy

pytest.importorskip("ale_py")
pytest.importorskip("cv2")


def test_short_and_full_ids():
    assert resolve_id(EnvConfig(id="Pong", suite="atari")) == "ale_py:ALE/Pong-v5"
    assert resolve_id(EnvConfig(id="ALE/Breakout-v5", suite="atari")) == "ale_py:ALE/Breakout-v5"
    with pytest.raises(ConfigError, match="env=atari has no task env.id='Pongg'"):
        resolve_id(EnvConfig(id="Pongg", suite="atari"))


@pytest.mark.parametrize(("policy", "shape"), [("lstm", (84, 84)), ("mlp", (4, 84, 84))])
def test_frames_are_uint8_and_stacked_for_mlp_only(policy, shape):
    # 4 envs: the preset's 4 minibatches split the lstm's env columns (2 would be refused)
    cfg = make_cfg("env=atari", f"policy={policy}", "env.num_envs=4")
    assert cfg.env.frame_stack == (4 if policy == "mlp" else 1)
    assert (cfg.loss.epochs, cfg.collector.frames_per_batch) == (4, 1024)  # the same for both
    env = make_env(cfg.env)
    try:
        obs = env.reset_tensors(seed=0)
        assert obs.dtype == torch.uint8 and obs.shape == (4, *shape)
        policy_net = make_policy(cfg.policy, env.specs)
        convs = [m for m in policy_net.modules() if isinstance(m, torch.nn.Conv2d)]
        assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs[:3]] == [
            (shape[0] if len(shape) == 3 else 1, 32, (8, 8), (4, 4)),
            (32, 64, (4, 4), (2, 2)),
            (64, 64, (3, 3), (1, 1)),
        ]  # the Nature-DQN stack
    finally:
        env.close()


def test_envpool_is_refused_with_the_wrappers():
    with pytest.raises(ConfigError, match="env.backend='envpool' is invalid: env=atari"):
        make_cfg("env=atari", "env.backend=envpool")


def test_smoke_lstm(tmp_path):
    args = [
        "train",
        "env=atari",
        "policy=lstm",
        "env.num_envs=4",
        "collector.frames_per_batch=128",
        "total_frames=256",
        "policy.hidden_size=16",
        "policy.cnn_features=32",
        "env.max_episode_steps=200",  # emulator frames: about 50 agent steps
        "eval.episodes=1",
        "eval.final_episodes=1",
        "logger.progress=none",
        f"hydra.run.dir={tmp_path}",
    ]
    assert main(args) == 0
    rows = metric_rows(tmp_path)
    assert rows[-1]["frames"] == "256" and rows[-1]["eval/return_mean"] != ""
