"""MultiDiscrete actions: a factored categorical (log-probs and entropies summed over the
factors, greedy = per-factor argmax), the env gets them with its offsets; PPO trains on them,
and loss=dqn refuses them with one line."""

from __future__ import annotations

import math

import torch

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.errors import ConfigError
from rltool.modules import make_policy
from rltool.modules.heads import MultiCategoricalHead


def test_factored_categorical_by_hand():
    head = MultiCategoricalHead(1, (3, 2))
    logits = torch.tensor([[0.0, math.log(2), math.log(5), math.log(3), 0.0]])
    params = {K.LOGITS: logits}
    action = torch.tensor([[1, 0]])
    want = math.log(2 / 8) + math.log(3 / 4)
    torch.testing.assert_close(head.log_prob(params, action), torch.tensor([want]))
    p1, p2 = torch.tensor([1, 2, 5]) / 8, torch.tensor([3, 1]) / 4
    ent = -(p1 * p1.log()).sum() - (p2 * p2.log()).sum()
    torch.testing.assert_close(head.entropy(params), ent.view(1))
    assert head.sample(params, explore=False).tolist() == [[2, 0]]
    torch.manual_seed(0)
    draws = head.sample({K.LOGITS: logits.expand(20000, 5)}, explore=True)
    assert draws.shape == (20000, 2) and draws.dtype == torch.int64
    freq0 = torch.bincount(draws[:, 0], minlength=3).float() / 20000
    torch.testing.assert_close(freq0, p1, atol=0.02, rtol=0)


def test_the_env_gets_multidiscrete_actions_and_the_policy_scores_them():
    torch.manual_seed(0)
    env = make_env(EnvConfig(id="FakeNested-v0", num_envs=3, kwargs={"multi": True}))
    assert env.specs.action.nvec == (3, 2) and env.specs.action.dtype == torch.int64
    policy = make_policy(PolicyConfig(inputs=["observation", "prev_action"]), env.specs)
    r = Collector(env, policy, 3 * 5, seed=0).collect()
    a = r[K.ACTION]
    assert a.shape == (5, 3, 2)
    torch.testing.assert_close(r[K.NEXT, K.REWARD][..., 0], (a[..., 0] + 10 * a[..., 1]).float())
    assert torch.equal(r[K.PREV_ACTION][1:], a[:-1])  # episodes never end here
    assert r[K.LOGITS].shape == (5, 3, 5)
    ev = policy.evaluate(r)
    torch.testing.assert_close(ev[K.SAMPLE_LOG_PROB], r[K.SAMPLE_LOG_PROB])


def test_dqn_refuses_multidiscrete_in_the_policy():
    env = make_env(EnvConfig(id="FakeNested-v0", num_envs=1, kwargs={"multi": True}))
    try:
        make_policy(PolicyConfig(), env.specs, heads=("q",))
    except ConfigError as e:
        assert "MultiDiscrete[3, 2]" in str(e) and "loss=ppo" in str(e)
    else:
        raise AssertionError("no error")


def test_ppo_trains_and_dqn_is_one_line_exit_2(tmp_path, cli):
    common = [
        "train",
        "env=gym",
        "env.id=fake_envs:FakeNested-v0",
        "+env.kwargs={multi:true,terminate_at:4}",
        "env.num_envs=2",
        "collector.frames_per_batch=64",
        "total_frames=128",
        "logger.progress=none",
    ]
    r = cli(*common, f"hydra.run.dir={tmp_path / 'ppo'}", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli(*common, "loss=dqn", f"hydra.run.dir={tmp_path / 'dqn'}", cwd=tmp_path)
    assert r.returncode == 2
    lines = [x for x in r.stderr.strip().splitlines() if not x.startswith("rltool: text")]
    assert len(lines) == 1 and "MultiDiscrete" in lines[0] and "loss=ppo" in lines[0], r.stderr
