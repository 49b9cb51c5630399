"""SACLoss and the squashed Gaussian against hand-computed values and references: the target
(terminated vs truncated, the target critics' min, the entropy term), the log-prob's change of
variables against torch.distributions, asymmetric Box bounds, alpha's gradient sign, which
parameters each sub-loss trains, Polyak target steps, reductions with a mask, burn-in."""

import math

import pytest
import torch
from tensordict import TensorDict
from torch.distributions import (
    AffineTransform,
    Independent,
    Normal,
    TanhTransform,
    TransformedDistribution,
)

from rltool import keys as K
from rltool import memories
from rltool.config import PolicyConfig
from rltool.errors import ConfigError
from rltool.losses import SACLoss
from rltool.modules import make_policy
from rltool.modules.heads import SquashedGaussianHead
from rltool.specs import EnvSpecs, Spec

HEADS = ("actor", "qvalue")
# an asymmetric Box: [-1, 3] x [0, 0.5]
BOX = Spec((2,), low=(-1.0, 0.0), high=(3.0, 0.5))
SPECS = EnvSpecs(observation=Spec((2,)), action=BOX)


def policy(kind="mlp", **kw):
    cfg = PolicyConfig(kind=kind, hidden_sizes=[8], hidden_size=8, **kw)
    return make_policy(cfg, SPECS, heads=HEADS)


def window(T=1, B=3, terminated=(False, True, False), truncated=(False, False, True)):
    g = torch.Generator().manual_seed(0)
    flag = lambda x: torch.tensor(x).reshape(1, B, 1).expand(T, B, 1)  # noqa: E731
    term, trunc = flag(terminated), flag(truncated)
    return TensorDict(
        {
            K.OBSERVATION: torch.randn(T, B, 2, generator=g),
            K.IS_INIT: torch.zeros(T, B, 1, dtype=torch.bool),
            K.ACTION: torch.tensor([1.0, 0.25]).expand(T, B, 2),
            K.NEXT: {
                K.OBSERVATION: torch.randn(T, B, 2, generator=g),
                K.REWARD: torch.tensor([1.0, -2.0, 0.5]).reshape(1, B, 1).expand(T, B, 1),
                K.TERMINATED: term,
                K.TRUNCATED: trunc,
                K.DONE: term | trunc,
            },
        },
        [T, B],
    )


def constant_q(p, q1, q2):
    """Each Q head's output = its last bias (the last layer's weights zeroed)."""
    with torch.no_grad():
        for head, value in zip(p.qvalue.q, (q1, q2), strict=True):
            head[1].weight.zero_()
            head[1].bias.fill_(value)


def fixed_draw(p, action, log_prob):
    """The actor's reparameterised draw replaced by a known one (action [2], log-prob)."""

    def rsample(params):
        shape = params[K.LOC].shape[:-1]
        a = torch.tensor(action).expand(*shape, 2) + 0 * params[K.LOC]  # keeps the graph
        return a, torch.full(shape, log_prob) + 0 * params[K.LOC].sum(-1)

    p.dist.rsample = rsample


def test_targets_terminal_truncated_and_the_target_critics():
    """y = r + 0.9 * (min target Q - alpha log pi'), 0 after a terminated step; the online
    critics (Q = 5, 7) are not the target's (Q' = 1, 2)."""
    p = policy()
    constant_q(p, 1.0, 2.0)
    loss = SACLoss(p, gamma=0.9, alpha_init=0.5)  # the target critics copy Q' = (1, 2)
    constant_q(p, 5.0, 7.0)
    fixed_draw(p, [0.0, 0.1], log_prob=-1.0)
    ev = loss.evaluate(window())
    boot = 0.9 * (1.0 - 0.5 * -1.0)  # min(1, 2) + alpha * 1
    want = torch.tensor([[1.0 + boot, -2.0, 0.5 + boot]])  # terminated: r; truncated: bootstrap
    torch.testing.assert_close(ev[K.VALUE_TARGET], want)
    out = loss(window())
    q_loss = ((5.0 - want) ** 2 + (7.0 - want) ** 2).mean()
    torch.testing.assert_close(out["loss_qvalue"], q_loss)
    torch.testing.assert_close(
        out["loss_actor"], torch.tensor(0.5 * -1.0 - 5.0)
    )  # alpha logp - min Q
    entropy_target = -2.0  # -|A|
    want_alpha = -math.log(0.5) * (-1.0 + entropy_target)
    torch.testing.assert_close(out["loss_alpha"], torch.tensor(want_alpha))


@pytest.mark.parametrize("log_prob, sign", [(3.0, -1), (5.0, -1), (1.0, 1), (-4.0, 1)])
def test_alpha_gradient_sign(log_prob, sign):
    """Entropy -log pi below the target -|A| = -2 (log pi > 2): the gradient in log_alpha is
    negative, so a descent step raises alpha; above the target it lowers it."""
    p = policy()
    loss = SACLoss(p, alpha_init=0.1)
    fixed_draw(p, [0.0, 0.1], log_prob=log_prob)
    loss.loss_alpha(window()).backward()
    grad = p.log_alpha.grad
    assert torch.sign(grad) == sign and torch.isclose(grad, torch.tensor(-(log_prob - 2.0)))


def test_each_sub_loss_trains_its_own_parameters():
    p = policy("gru", inputs=["observation", "prev_action", "prev_reward"])
    loss = SACLoss(p, alpha_init=0.1)
    td = window(T=4)
    for k, s in p.state_specs.items():
        td.set(k, s.zeros(*td.shape))
    td.set(K.PREV_ACTION, torch.zeros(4, 3, 2))
    td.set(K.PREV_REWARD, torch.zeros(4, 3, 1))
    owners = {
        "loss_qvalue": ("critic_torso.", "qvalue."),
        "loss_actor": ("actor_torso.", "dist."),
        "loss_alpha": ("log_alpha",),
    }
    for term, prefixes in owners.items():
        p.zero_grad(set_to_none=True)
        loss(td)[term].backward()
        for name, param in p.named_parameters():
            has = param.grad is not None and bool(param.grad.abs().sum() > 0)
            assert has == name.startswith(prefixes), (term, name)


def test_target_critics_move_by_tau():
    p = policy()
    loss = SACLoss(p, tau=0.25)
    before = loss.target.params.clone()
    with torch.no_grad():
        for x in p.qvalue.parameters():
            x.add_(1.0)
    online = TensorDict.from_module(loss.critic).data
    loss.update_target()
    want = before.apply(lambda b, o: 0.75 * b + 0.25 * o, online)
    for key, value in want.items(True, True):
        torch.testing.assert_close(loss.target.params[key], value)
    assert loss.target.updates == 1 and not (want == before).all()
    assert "log_alpha" not in loss.target.params  # the critics' parameters only


def test_squash_log_prob_matches_torch_distributions():
    head = SquashedGaussianHead(4, 2, BOX.low, BOX.high)
    params = head(torch.randn(5, 4))
    base = Independent(Normal(params[K.LOC], params[K.SCALE]), 1)
    low, high = torch.tensor(BOX.low), torch.tensor(BOX.high)
    ref = TransformedDistribution(
        base, [TanhTransform(), AffineTransform((high + low) / 2, (high - low) / 2)]
    )
    torch.manual_seed(1)
    action, log_prob = head.rsample(params)
    torch.testing.assert_close(log_prob, ref.log_prob(action), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(head.log_prob(params, action), log_prob, rtol=1e-4, atol=1e-4)
    assert ((action >= low) & (action <= high)).all()


def test_asymmetric_bounds_greedy_and_samples():
    """Greedy (evaluation, export): the scaled tanh of the mean; samples stay in the Box."""
    p = policy()
    p.explore = False
    obs = torch.randn(6, 2)
    out, _ = p.step({K.OBSERVATION: obs}, {}, torch.zeros(6, 1, dtype=torch.bool))
    loc = p.dist(p.actor_torso(obs, {}, None, False)[0])[K.LOC]
    torch.testing.assert_close(
        out[K.ACTION], torch.tensor([1.0, 0.25]) + torch.tensor([2.0, 0.25]) * loc.tanh()
    )
    p.explore = True
    params = {K.LOC: torch.full((1000, 2), 3.0), K.SCALE: torch.full((1000, 2), 3.0)}
    a = p.dist.sample(params, True)
    assert (
        (a[:, 0] >= -1).all()
        and (a[:, 0] <= 3).all()
        and (a[:, 1] >= 0).all()
        and (a[:, 1] <= 0.5).all()
    )
    assert a[:, 0].max() > 2.9 and a[:, 1].max() > 0.49  # the squash reaches the upper bounds


def test_discrete_and_unbounded_actions_are_refused():
    cfg = PolicyConfig()
    with pytest.raises(ConfigError, match="needs continuous"):
        make_policy(cfg, EnvSpecs(Spec((2,)), Spec((), torch.int64, n=2)), heads=HEADS)
    inf = Spec((1,), low=(-math.inf,), high=(math.inf,))
    with pytest.raises(ConfigError, match="infinite"):
        make_policy(cfg, EnvSpecs(Spec((2,)), inf), heads=HEADS)


def test_mask_and_reduction():
    """Reduction "none" keeps [T - burn_in, B], zeros off the mask; mean counts masked-in ones."""
    p = policy()
    constant_q(p, 0.0, 0.0)
    loss = SACLoss(p, gamma=0.9, alpha_init=0.5, reduction="none")
    fixed_draw(p, [0.0, 0.1], log_prob=0.0)
    td = window(T=2)
    td.set(K.MASK, torch.tensor([True, False, True]).reshape(1, 3, 1).expand(2, 3, 1).clone())
    err = loss.loss_qvalue(td)
    assert err.shape == (2, 3) and (err[:, 1] == 0).all() and (err[:, 0] == 2.0).all()
    loss.reduction = "mean"
    torch.testing.assert_close(loss.loss_qvalue(td), err.sum() / 4)


def test_burn_in_steps_only_warm_the_memories():
    """With burn-in b, the loss equals the loss on td[b:] from the states the memories reach
    over td[:b] (online and target alike)."""
    p = policy("gru")
    td = window(T=5)
    for k, s in p.state_specs.items():
        td.set(k, s.zeros(*td.shape))
    loss = SACLoss(p, burn_in=2)
    torch.manual_seed(3)
    warm = loss.loss_qvalue(td)
    runs = p.sequence_features(td[:2], p.torsos, need_states=True)
    rest = td[2:].clone()
    for _, states in runs:
        for k, s in states.items():
            rest.set(k, s[-1].unsqueeze(0).expand(3, *s.shape[1:]).detach())
    plain = SACLoss(p, burn_in=0)
    torch.manual_seed(3)
    torch.testing.assert_close(plain.loss_qvalue(rest), warm)


@pytest.mark.parametrize("kind", memories.kinds())
def test_every_memory_trains_with_sac(kind):
    """Each memory (and the MLP) as the actor's and the critics' torsos: finite terms, a
    gradient for every parameter, the two memories' states separate."""
    inputs = ["observation", "prev_action", "prev_reward"]
    p = make_policy(PolicyConfig(kind=kind, hidden_size=8, inputs=inputs), SPECS, heads=HEADS)
    td = window(T=6)
    for k, s in p.state_specs.items():
        td.set(k, s.zeros(*td.shape))
    td.set(K.PREV_ACTION, torch.zeros(6, 3, 2))
    td.set(K.PREV_REWARD, torch.zeros(6, 3, 1))
    loss = SACLoss(p, burn_in=0 if kind == "mlp" else 2)
    out = loss(td)
    total = sum(v for k, v in out.items() if k.startswith("loss_"))
    assert torch.isfinite(total)
    total.backward()
    assert all(x.grad is not None for x in p.parameters())
    critic = set(p.critic_torso.state_specs)
    assert critic.isdisjoint(p.actor_torso.state_specs) and (kind == "mlp") != bool(critic)
