"""The algorithm registry: a third algorithm (REINFORCE, defined here) trains through the same
``train()`` with its own config schema, checkpoint part, exact resume and evaluation; and the
run's one-page files never name an algorithm."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from conftest import metric_rows

from rltool import algos
from rltool import keys as K
from rltool.algos.base import Algorithm
from rltool.config import (
    BufferConfig,
    CheckpointConfig,
    CollectorConfig,
    Config,
    EnvConfig,
    EvalConfig,
    LoggerConfig,
    OptimConfig,
    PolicyConfig,
    check_fields,
    loss_reduction,
    ranged,
)
from rltool.errors import ConfigError
from rltool.losses.reduction import reduce
from rltool.run import checkpoint as ckpt
from rltool.testing import faults as _faults
from rltool.train import build, train, update

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class ReinforceConfig:
    name: str = "reinforce"
    gamma: float = ranged(0.5, ge=0, le=1)
    reduction: str = loss_reduction()

    def __post_init__(self):
        check_fields(self, "loss")


class Reinforce(Algorithm):
    """-G_t log pi(a_t | s_t), G_t the discounted return to the episode's or the rollout's end;
    one gradient step per rollout. Counts its updates (a checkpoint part of its own)."""

    def __init__(self, cfg, env, policy, run_dir=None):
        super().__init__(cfg, env, policy, run_dir)
        self.count = 0

    def update(self, batch, progress, frames, step):
        gamma = self.cfg.loss.gamma
        reward = batch.get(K.nxt(K.REWARD)).squeeze(-1)
        done = batch.get(K.nxt(K.DONE)).squeeze(-1)
        ret, running = torch.zeros_like(reward), torch.zeros_like(reward[0])
        for t in reversed(range(reward.shape[0])):
            running = reward[t] + gamma * running * (~done[t])
            ret[t] = running
        logp = self.policy.evaluate(batch)[K.SAMPLE_LOG_PROB]
        loss = reduce(-ret * logp, self.cfg.loss.reduction)
        step({"loss_policy": loss, "return_to_go": ret.mean()})
        self.count += 1
        return {"updates": self.count}

    def state_parts(self):
        return {"reinforce": self}, {}

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = int(state["count"])


@pytest.fixture
def reinforce():
    spec = algos.register(algos.AlgoSpec("reinforce", ReinforceConfig, ("actor",), Reinforce))
    yield spec
    algos.unregister("reinforce")


def cfg(env_id="CartPole-v1", **kw) -> Config:
    """Two envs (FakeCount: reward 1 + action, truncated after 5 steps), a linear softmax policy."""
    parts = dict(
        env=EnvConfig(id=env_id, num_envs=2, max_episode_steps=5),
        policy=PolicyConfig(hidden_sizes=[]),
        loss=ReinforceConfig(),
        collector=CollectorConfig(frames_per_batch=16),
        buffer=BufferConfig(),
        optim=OptimConfig(lr=0.05),
        logger=LoggerConfig(progress="none"),
        eval=EvalConfig(every_frames=32, episodes=2, final_episodes=3),
        checkpoint=CheckpointConfig(every_frames=32),
        total_frames=96,
    )
    return Config(**(parts | kw))


class Crash(Exception):
    pass


def test_a_registered_algorithm_trains_checkpoints_resumes_and_evaluates(
    reinforce, tmp_path, monkeypatch
):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    summary = train(cfg(), a)
    got = metric_rows(a)
    assert [r["frames"] for r in got] == [str(16 * i) for i in range(1, 7)]
    assert [r["updates"] for r in got] == [str(i) for i in range(1, 7)]
    assert float(got[0]["loss_policy"]) != 0 and "return_to_go" in got[0]
    # the final evaluation: 3 greedy episodes of at most 5 steps (the time limit), 1 reward a step
    assert summary["eval/episodes"] == 3
    assert summary["eval/return_mean"] == summary["eval/length_mean"] <= 5
    body = ckpt.load(ckpt.latest(a / "checkpoints"))
    assert body["state"]["reinforce"] == {"count": 6}

    writes = []

    def crash_on_second_write(point):  # killed while writing the checkpoint at 64 frames
        writes.append(point)
        if writes.count("checkpoint.after_fsync") == 2:
            raise Crash

    monkeypatch.setattr(_faults, "test_hook", crash_on_second_write)
    with pytest.raises(Crash):
        train(cfg(), b)
    monkeypatch.setattr(_faults, "test_hook", None)
    assert ckpt.latest(b / "checkpoints").name == "ckpt-000000000032.pt"
    train(cfg(resume=str(b)), b)
    assert metric_rows(b) == got  # the update count came back from the checkpoint too

    from rltool import load_policy

    policy, state = load_policy(a)
    action, _ = policy([0.0, 0.0, 0.0, 0.0], state)
    assert action in (0, 1)


def test_its_gradient_equals_the_hand_computed_policy_gradient(reinforce):
    run = build(cfg("FakeCount-v0"))
    batch = run.collector.collect()  # [8, 2]
    grads = []
    run.grad_hook = lambda params: grads.append([p.grad.clone() for p in params])
    weight, bias = (p.detach().clone() for p in run.policy.parameters())
    update(run, batch, 0.0, batch.numel())
    run.collector.close()
    run.eval_env.close()

    # by hand: d/dW log softmax(W s + c)[a] = (onehot(a) - p) s^T; G from the rewards, cut at done
    obs, act = batch[K.OBSERVATION].tolist(), batch[K.ACTION].tolist()
    rew, done = batch[K.NEXT, K.REWARD].tolist(), batch[K.NEXT, K.DONE].tolist()
    T, B = batch.shape
    g_w, g_c = torch.zeros(2, 2, dtype=torch.float64), torch.zeros(2, dtype=torch.float64)
    for b in range(B):
        ret = 0.0
        for t in reversed(range(T)):
            ret = rew[t][b][0] + 0.5 * ret * (not done[t][b][0])
            s = torch.tensor(obs[t][b], dtype=torch.float64)
            logits = weight.double() @ s + bias.double()
            p = torch.softmax(logits, 0)
            onehot = torch.nn.functional.one_hot(torch.tensor(act[t][b]), 2).double()
            g_w -= ret * torch.outer(onehot - p, s) / (T * B)
            g_c -= ret * (onehot - p) / (T * B)
    assert len(grads) == 1
    torch.testing.assert_close(grads[0][0].double(), g_w, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grads[0][1].double(), g_c, rtol=1e-5, atol=1e-6)
    assert g_w.abs().max() > 1e-3  # not a vacuous zero


def test_its_config_is_checked_and_unknown_algorithms_are_one_line(reinforce):
    with pytest.raises(ConfigError, match=r"loss.gamma=1.5 is invalid"):
        cfg(loss=ReinforceConfig(gamma=1.5))
    with pytest.raises(ConfigError, match=r"dueling head is a Q-network's \(loss=dqn\)"):
        cfg(policy=PolicyConfig(hidden_sizes=[], dueling=True))
    with pytest.raises(ConfigError, match=r"loss.name='ppo' does not match .* loss=ppo"):
        cfg(loss=dataclasses.replace(ReinforceConfig(), name="ppo"))
    algos.unregister("reinforce")
    with pytest.raises(ConfigError, match=r"loss.name='reinforce' names no algorithm: choose one"):
        cfg()


@pytest.mark.parametrize(
    "path",
    ["rltool/train.py", "rltool/config/", "rltool/run/session.py", "rltool/modules/factory.py"],
)
def test_the_run_files_never_name_an_algorithm(path):
    files = sorted((ROOT / path).rglob("*.py")) if path.endswith("/") else [ROOT / path]
    text = "".join(f.read_text() for f in files)
    found = re.findall(r"(?i)\b(?:ppo|dqn)\w*", text)
    assert not found, f"{path} names {sorted(set(found))}: ask rltool.algos instead"


def test_builtin_algorithms_are_registered_with_their_heads():
    got = {s.name: s.heads for s in algos.specs()}
    assert got["ppo"] == ("actor", "critic") and got["dqn"] == ("q",)
    assert math.isclose(algos.get("ppo").config().gamma, 0.98)  # rl-zoo CartPole PPO's
