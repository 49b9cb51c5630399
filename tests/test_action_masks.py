"""Action masks (``env.action_mask``): read from an observation entry, the info or an env method,
stored with each step, applied by the heads in collection, the PPO loss, DQN's exploration and
target, evaluation and ``rltool.load_policy``. The fake env (``MaskedEnv``) punishes an invalid
action and counts it; its valid set changes every step."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch
from fake_envs import MaskedEnv
from tensordict import TensorDict
from torch import nn

import rltool
from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.errors import ConfigError, EnvError
from rltool.losses import DQNLoss, PPOLoss, add_gae
from rltool.modules import make_policy
from rltool.modules.heads import CategoricalHead, MultiCategoricalHead, mask_logits, masked_max
from rltool.run.evaluation import evaluate

MEMORIES = ["mlp", "lstm", "gru", "mingru", "ffm", "trxl"]


def _setup(env_id="FakeMaskedObs-v0", kind="mlp", heads=("actor", "critic"), **env_kw):
    env = make_env(EnvConfig(id=env_id, num_envs=4, **env_kw))
    torch.manual_seed(0)
    policy = make_policy(
        PolicyConfig(kind=kind, hidden_sizes=[16], hidden_size=16), env.specs, heads
    )
    return env, policy


def _valid(td) -> torch.Tensor:
    """[T, B] bool: each stored action allowed by the stored mask (every factor)."""
    mask, action = td[K.ACTION_MASK], td[K.ACTION]
    if action.dim() == mask.dim() - 1:
        return mask.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    out, start = torch.ones(action.shape[:-1], dtype=torch.bool), 0
    for i, n in enumerate((3, 2)):
        out &= mask[..., start : start + n].gather(-1, action[..., i : i + 1]).squeeze(-1)
        start += n
    return out


# ---- the maths, by hand ----
def test_masked_log_prob_and_entropy_are_over_the_valid_actions():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.5]], requires_grad=True)
    mask = torch.tensor([[True, False, True, False]])
    params = {K.LOGITS: mask_logits(logits, mask)}
    z = math.exp(1.0) + math.exp(3.0)  # only actions 0 and 2
    p0, p2 = math.exp(1.0) / z, math.exp(3.0) / z
    for a, p in ((0, p0), (2, p2)):
        got = CategoricalHead.log_prob(params, torch.tensor([a]))
        assert got.item() == pytest.approx(math.log(p), rel=1e-6)
    assert CategoricalHead.log_prob(params, torch.tensor([1])).item() < -1e30  # never sampled
    entropy = CategoricalHead.entropy(params)
    assert entropy.item() == pytest.approx(-(p0 * math.log(p0) + p2 * math.log(p2)), rel=1e-6)
    entropy.backward()  # the lowest finite value, not -inf: no NaN in the value or the gradient
    assert torch.isfinite(logits.grad).all() and (logits.grad[0, [1, 3]] == 0).all()
    # greedy and sampled actions are valid, even where the best logit is masked
    assert CategoricalHead.sample(params, explore=False).item() == 2
    many = mask_logits(torch.randn(20_000, 4) * 30, mask.expand(20_000, 4))
    draws = CategoricalHead.sample({K.LOGITS: many}, explore=True, masked=True)
    assert set(draws.tolist()) <= {0, 2}


def test_multidiscrete_masks_act_per_factor():
    head = MultiCategoricalHead(3, (3, 2))
    logits = torch.tensor([[0.0, 1.0, 2.0, 5.0, 0.0]])
    mask = torch.tensor([[True, True, False, False, True]])  # factor 0: {0, 1}; factor 1: {1}
    params = {K.LOGITS: mask_logits(logits, mask)}
    lp = head.log_prob(params, torch.tensor([[1, 1]]))
    assert lp.item() == pytest.approx(math.log(math.e / (1 + math.e)) + 0.0, rel=1e-6)
    p = 1 / (1 + math.e)
    assert head.entropy(params).item() == pytest.approx(
        -(p * math.log(p) + (1 - p) * math.log(1 - p)), rel=1e-6
    )
    assert head.sample(params, explore=False).tolist() == [[1, 1]]


class _FixedQ(nn.Module):
    """A stand-in Q-network: ``action_values`` returns fixed Q and next-Q [1, N, n]."""

    def __init__(self, q, q_next):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))
        self.q, self.q_next, self.state_specs = q, q_next, {}

    def action_values(self, td, with_next=False, need_states=False):
        return self.q + self.w, (self.q_next if with_next else None), {}


@pytest.mark.parametrize("double", [False, True])
def test_dqn_target_takes_the_max_over_the_valid_next_actions(double):
    q = torch.tensor([[[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]]])
    q_next = torch.tensor([[[9.0, 4.0, 1.0], [5.0, 7.0, 6.0]]])
    next_mask = torch.tensor([[[False, True, True], [False, False, False]]])  # row 2: terminal
    td = TensorDict(
        {
            K.ACTION: torch.tensor([[0, 1]]),
            K.NEXT: {
                K.REWARD: torch.tensor([[[1.0], [1.0]]]),
                K.TERMINATED: torch.tensor([[[False], [True]]]),
                K.DONE: torch.tensor([[[False], [True]]]),
                K.ACTION_MASK: next_mask,
            },
        },
        [1, 2],
    )
    loss = DQNLoss(_FixedQ(q, q_next), gamma=0.5, double_dqn=double)
    target = loss.evaluate(td)[K.VALUE_TARGET]
    # max over {1, 2} of [9, 4, 1] is 4 (9 is invalid); double DQN: the online net's valid argmax
    # is the same network here, so 4 too. Row 2 is terminal (its mask allows nothing): 1 + 0.
    assert target.tolist() == [[1 + 0.5 * 4, 1.0]]
    assert masked_max(q_next, next_mask).tolist() == [[4.0, 0.0]]


# ---- collection, evaluation, load_policy: never an invalid action ----
@pytest.mark.parametrize(
    ("env_id", "label"),
    [
        ("FakeMaskedObs-v0", "obs:action_mask"),
        ("FakeMaskedInfo-v0", "info:action_mask"),
        ("FakeMaskedMethod-v0", "method:action_masks"),
        ("FakeMaskedMulti-v0", "obs:action_mask"),
    ],
)
def test_masked_collection_never_takes_an_invalid_action(env_id, label):
    env, policy = _setup(env_id)
    assert env._masks.label == label  # found by auto
    MaskedEnv.INVALID = 0
    c = Collector(env, policy, 4 * 1000, seed=0)
    td = c.collect()
    assert MaskedEnv.INVALID == 0 and _valid(td).all()
    assert not td[K.ACTION_MASK].all()  # the masks did restrict
    # ("next", mask) is the next step's mask where no episode ended
    same = ~td[K.NEXT, K.DONE][:-1, :, 0]
    assert (td[K.NEXT, K.ACTION_MASK][:-1][same] == td[K.ACTION_MASK][1:][same]).all()
    # the test has teeth: the same run without masks does take invalid actions
    env2, policy2 = _setup(env_id, action_mask="none")
    assert env2.specs.action_mask is None
    Collector(env2, policy2, 4 * 1000, seed=0).collect()
    assert MaskedEnv.INVALID > 100


def test_the_tensordict_path_stores_the_same_masks():
    out = []
    for use_td in (False, True):
        env, policy = _setup()
        torch.manual_seed(3)
        out.append(Collector(env, policy, 4 * 50, seed=1, use_tensordict=use_td).collect())
    for key in (K.ACTION_MASK, K.nxt(K.ACTION_MASK), K.ACTION):
        assert torch.equal(out[0][key], out[1][key])


def test_the_mask_entry_is_no_observation_feature_unless_listed():
    env, _ = _setup()
    assert set(env.specs.observation.entries) == {"pos"}
    listed = make_env(EnvConfig(id="FakeMaskedObs-v0", num_envs=2, obs_keys=["pos", "action_mask"]))
    assert set(listed.specs.observation.entries) == {"pos", "action_mask"}
    assert listed.specs.action_mask is not None


@pytest.mark.parametrize("kind", MEMORIES)
def test_every_memory_takes_no_invalid_action(kind):
    env, policy = _setup("FakeMaskedInfo-v0", kind)
    MaskedEnv.INVALID = 0
    c = Collector(env, policy, 4 * 150, seed=0)
    batch = add_gae(c.collect().clone(), 0.99, 0.95)
    loss = PPOLoss(policy)
    policy.train()
    terms = loss(batch)  # the stored mask is used in the loss: the first-epoch ratio is 1
    assert terms["approx_kl"].abs() < 1e-6 and terms["clip_fraction"] == 0
    sum(terms[k] for k in ("loss_actor", "loss_value", "loss_entropy")).backward()
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)
    assert MaskedEnv.INVALID == 0 and _valid(batch).all()


@pytest.mark.parametrize("kind", ["mlp", "lstm"])
def test_ppo_first_epoch_ratio_is_one_with_masks(kind):
    env, policy = _setup("FakeMaskedObs-v0", kind)
    c = Collector(env, policy, 4 * 64, seed=0)
    c.collect()
    batch = add_gae(c.collect().clone(), 0.99, 0.95)
    policy.train()
    ev = PPOLoss(policy).evaluate(batch)
    torch.testing.assert_close(ev[K.SAMPLE_LOG_PROB], batch[K.SAMPLE_LOG_PROB], rtol=0, atol=1e-6)
    torch.testing.assert_close(ev[K.LOGITS], batch[K.LOGITS], rtol=0, atol=1e-6)
    # teeth: scored without the stored mask, the log-probs differ
    unmasked = batch.clone()
    unmasked[K.ACTION_MASK].fill_(True)
    drift = (PPOLoss(policy).evaluate(unmasked)[K.SAMPLE_LOG_PROB] - batch[K.SAMPLE_LOG_PROB]).abs()
    assert drift.max() > 1e-3


def test_dqn_explores_and_acts_greedily_over_valid_actions_only():
    env, policy = _setup("FakeMaskedMethod-v0", "gru", heads=("q",))
    MaskedEnv.INVALID = 0
    for eps in (1.0, 0.3, 0.0):
        policy.epsilon = eps
        td = Collector(env, policy, 4 * 300, seed=0).collect()
        assert _valid(td).all()
    assert MaskedEnv.INVALID == 0


def test_evaluation_and_load_policy_never_take_an_invalid_action(tmp_path):
    cfg = rltool.compose(
        "env=gym",
        "env.id=FakeMaskedInfo-v0",
        "env.num_envs=4",
        "policy=lstm",
        "total_frames=1024",
        "eval.every_frames=1024",
        "eval.episodes=4",
        "eval.final_episodes=4",
        "logger.progress=none",
    )
    MaskedEnv.INVALID = 0
    rltool.fit(cfg, tmp_path / "run")
    assert MaskedEnv.INVALID == 0
    env, policy = _setup("FakeMaskedInfo-v0", "gru")
    row = evaluate(policy, env, seed=0, episodes=100)
    assert row["eval/return_mean"] == 20.0 and MaskedEnv.INVALID == 0  # 20 valid steps each

    loaded, state = rltool.load_policy(tmp_path / "run")
    raw = gym.make("FakeMaskedInfo-v0")
    obs, info = raw.reset(seed=0)
    for _ in range(3000):
        action, state = loaded(obs, state, info=info)
        obs, _, term, trunc, info = raw.step(action)
        if term or trunc:
            obs, info = raw.reset()
            state = loaded.initial_state()
    assert MaskedEnv.INVALID == 0
    with pytest.raises(rltool.errors.UserError, match="info="):
        loaded(obs, state)  # the mask must come from somewhere
    action, _ = loaded(obs, state, action_mask=np.array([0, 0, 1, 0]))
    assert action == 2


# ---- bad input ----
def test_a_mask_that_allows_nothing_stops_the_run_naming_env_and_step():
    env, policy = _setup("FakeMaskedEmpty-v0")
    with pytest.raises(EnvError, match=r"env FakeMaskedEmpty-v0, env 0, step 3: action mask"):
        Collector(env, policy, 4 * 10, seed=0).collect()


@pytest.mark.parametrize(
    ("env_kw", "error", "match"),
    [
        ({"id": "FakeMaskedShape-v0"}, ConfigError, r"shape \[5\] .*needs \[4\] bool"),
        ({"id": "FakeMaskedFloat-v0"}, ConfigError, "dtype float32"),
        ({"id": "FakeMaskedObs-v0", "action_mask": "obs:nope"}, ConfigError, "no entry 'nope'"),
        ({"id": "FakeMaskedInfo-v0", "action_mask": "method:x"}, ConfigError, "no method 'x'"),
        ({"id": "FakeCount-v0", "action_mask": "info:mask"}, EnvError, "info has no 'mask'"),
    ],
)
def test_a_bad_mask_is_refused_before_training(env_kw, error, match):
    with pytest.raises(error, match=match) as caught:
        env = make_env(EnvConfig(num_envs=2, **env_kw))
        Collector(env, make_policy(PolicyConfig(), env.specs), 2 * 4, seed=0)
    assert "\n" not in str(caught.value)  # one line


def test_the_config_value_is_checked():
    with pytest.raises(ConfigError, match="env.action_mask"):
        EnvConfig(action_mask="observation")
    with pytest.raises(ConfigError, match="env.action_mask"):
        EnvConfig(action_mask="info:")
    assert EnvConfig().action_mask == "auto"
    env = make_env(EnvConfig(id="FakeCount-v0", num_envs=2))  # auto, nothing found: no mask
    assert env.specs.action_mask is None
