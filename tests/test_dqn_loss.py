"""DQNLoss against hand-computed values: targets (plain / double, n-step, terminated vs
truncated), every reduction with and without a mask, target-network updates, burn-in, epsilon."""

import pytest
import torch
from tensordict import TensorDict

from rltool import keys as K
from rltool.config import PolicyConfig
from rltool.losses import DQNLoss, linear_schedule, n_step_targets
from rltool.modules import make_policy
from rltool.modules.recurrent import recurrent_mode
from rltool.specs import EnvSpecs, Spec

SPECS = EnvSpecs(observation=Spec((2,)), action=Spec((), torch.int64, n=2))


def linear_q(weight, bias=(0.0, 0.0)):
    """A Q-network with no hidden layer: Q(s) = W s + b."""
    policy = make_policy(PolicyConfig(hidden_sizes=[]), SPECS, heads=("q",))
    with torch.no_grad():
        policy.dist.linear.weight.copy_(torch.tensor(weight))
        policy.dist.linear.bias.copy_(torch.tensor(bias))
    return policy


def make_loss(double=False, **kw):
    """Online Q(s) = s; target Q'(s) = [3 s0, s1]: online and target argmax can differ."""
    loss = DQNLoss(linear_q([[1.0, 0.0], [0.0, 1.0]]), gamma=0.9, double_dqn=double, **kw)
    loss.target_params["dist", "linear", "weight"].copy_(torch.tensor([[3.0, 0.0], [0.0, 1.0]]))
    return loss


def transitions(obs, action, reward, next_obs, terminated, truncated, batch=None):
    """A [T, B] window from per-step lists (T = 1 unless ``batch`` says otherwise)."""
    obs = torch.tensor(obs)
    shape = batch or [1, obs.shape[0]]
    col = lambda x, dt=torch.float32: torch.tensor(x, dtype=dt).reshape(*shape, 1)  # noqa: E731
    term, trunc = col(terminated, torch.bool), col(truncated, torch.bool)
    return TensorDict(
        {
            K.OBSERVATION: obs.reshape(*shape, 2),
            K.IS_INIT: torch.zeros(*shape, 1, dtype=torch.bool),
            K.ACTION: torch.tensor(action).reshape(shape),
            K.NEXT: {
                K.OBSERVATION: torch.tensor(next_obs).reshape(*shape, 2),
                K.REWARD: col(reward),
                K.TERMINATED: term,
                K.TRUNCATED: trunc,
                K.DONE: term | trunc,
            },
        },
        shape,
    )


# sample 0: plain target 1 + .9 * max(3, 2) = 3.7, double 1 + .9 * Q'(s')[argmax s' = 1] = 2.8
# sample 1: terminated -> 0.5; sample 2: truncated -> bootstraps from the final obs: -1 + .9 * 3
BATCH = dict(
    obs=[[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]],
    action=[0, 1, 1],
    reward=[1.0, 0.5, -1.0],
    next_obs=[[1.0, 2.0], [2.0, 1.0], [1.0, 3.0]],
    terminated=[False, True, False],
    truncated=[False, False, True],
)
Q_CHOSEN = torch.tensor([[1.0, 2.0, 1.0]])


@pytest.mark.parametrize(
    "double, target", [(False, [3.7, 0.5, 1.7]), (True, [2.8, 0.5, 1.7])], ids=["plain", "double"]
)
def test_td_error_plain_and_double(double, target):
    loss, td = make_loss(double), transitions(**BATCH)
    ev = loss.evaluate(td)
    torch.testing.assert_close(ev[K.CHOSEN_ACTION_VALUE], Q_CHOSEN)
    torch.testing.assert_close(ev[K.VALUE_TARGET], torch.tensor([target]))
    torch.testing.assert_close(loss.td_error(td), torch.tensor([target]) - Q_CHOSEN)


ERR = torch.tensor([[2.7, -1.5, 0.7]])  # plain targets - Q
MASK = torch.tensor([[True, False, True]])


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("fn", ["l2", "smooth_l1"])
def test_value_loss_reductions(fn, reduction, masked):
    loss, td = make_loss(loss_function=fn, reduction=reduction), transitions(**BATCH)
    per = ERR**2 if fn == "l2" else torch.where(ERR.abs() < 1, 0.5 * ERR**2, ERR.abs() - 0.5)
    if masked:
        td.set(K.MASK, MASK.unsqueeze(-1))
        per = per * MASK
    want = {"none": per, "sum": per.sum(), "mean": per.sum() / (2 if masked else 3)}[reduction]
    torch.testing.assert_close(loss.value_loss(td), want)


def test_masked_td_error_is_zero_and_forward_diagnostics():
    loss, td = make_loss(), transitions(**BATCH)
    td.set(K.MASK, MASK.unsqueeze(-1))
    torch.testing.assert_close(loss.td_error(td), ERR * MASK)
    out = loss(td)
    torch.testing.assert_close(out["loss_value"], (ERR**2 * MASK).sum() / 2)
    torch.testing.assert_close(out["q_mean"], torch.tensor(1.0))  # Q of samples 0 and 2
    torch.testing.assert_close(out["target_mean"], torch.tensor((3.7 + 1.7) / 2))
    torch.testing.assert_close(out["td_error_abs_max"], torch.tensor(2.7))


def test_priority_weights_scale_the_loss():
    loss, td = make_loss(reduction="sum"), transitions(**BATCH)
    td.set(K.PRIORITY_WEIGHT, torch.tensor([[[1.0], [0.5], [0.0]]]))
    torch.testing.assert_close(loss.value_loss(td), torch.tensor(2.7**2 + 0.5 * 1.5**2))


def test_n_step_targets_by_hand():
    r = torch.tensor([[1.0], [2.0], [3.0], [4.0]])
    v = torch.tensor([[10.0], [20.0], [30.0], [40.0]])
    term = torch.tensor([[False], [False], [True], [False]])
    trunc = torch.tensor([[False], [True], [False], [False]])
    done = term | trunc
    g = 0.5
    # n=1: truncated step 1 bootstraps from its final-obs value, terminated step 2 does not
    torch.testing.assert_close(
        n_step_targets(r, v, term, done, g, 1).squeeze(-1),
        torch.tensor([1 + g * 10, 2 + g * 20, 3.0, 4 + g * 40]),
    )
    # n=3: stop at the first done (step 1 truncated, step 2 terminated) and at the window's end
    torch.testing.assert_close(
        n_step_targets(r, v, term, done, g, 3).squeeze(-1),
        torch.tensor([1 + g * 2 + g * g * 20, 2 + g * 20, 3.0, 4 + g * 40]),
    )
    no_done = torch.zeros_like(done)
    torch.testing.assert_close(
        n_step_targets(r, v, no_done, no_done, g, 2).squeeze(-1),
        torch.tensor([1 + g * 2 + g * g * 20, 2 + g * 3 + g * g * 30, 3 + g * 4 + g * g * 40, 24]),
    )


def test_n_step_through_the_loss():
    loss = make_loss(n_steps=2)
    loss.gamma = 0.5
    td = transitions(
        obs=[[1.0, 0.0], [0.0, 1.0]],
        action=[0, 1],
        reward=[1.0, 2.0],
        next_obs=[[0.0, 1.0], [1.0, 2.0]],
        terminated=[False, False],
        truncated=[False, False],
        batch=[2, 1],
    )
    # t=0: 1 + .5 * 2 + .25 * max Q'([1, 2]) = 2.75; t=1 (window end): 2 + .5 * 3 = 3.5
    torch.testing.assert_close(loss.evaluate(td)[K.VALUE_TARGET], torch.tensor([[2.75], [3.5]]))


def test_hard_target_update_every_k():
    loss = DQNLoss(linear_q([[1.0, 0.0], [0.0, 1.0]]), target_update="hard", target_update_every=3)
    w = loss.policy.dist.linear.weight
    with torch.no_grad():
        w.add_(1.0)
    for _ in range(2):
        loss.update_target()
        torch.testing.assert_close(loss.target_params["dist", "linear", "weight"], torch.eye(2))
    loss.update_target()
    torch.testing.assert_close(loss.target_params["dist", "linear", "weight"], w.detach())


def test_soft_target_update():
    loss = DQNLoss(linear_q([[1.0, 0.0], [0.0, 1.0]]), target_update="soft", tau=0.25)
    with torch.no_grad():
        loss.policy.dist.linear.weight.fill_(3.0)
    loss.update_target()
    once = 0.75 * torch.eye(2) + 0.25 * 3.0
    torch.testing.assert_close(loss.target_params["dist", "linear", "weight"], once)
    loss.update_target()
    torch.testing.assert_close(loss.target_params["dist", "linear", "weight"], 0.75 * once + 0.75)
    assert loss.policy.dist.linear.weight.eq(3.0).all()  # the online network is untouched


def test_target_params_are_used_not_online():
    loss = make_loss()
    with torch.no_grad():
        loss.policy.dist.linear.weight.mul_(100)  # online changes do not reach the target pass
    target = loss.evaluate(transitions(**BATCH))[K.VALUE_TARGET]
    torch.testing.assert_close(target, torch.tensor([[3.7, 0.5, 1.7]]))


def test_epsilon_schedule_and_greedy():
    assert [linear_schedule(1.0, 0.1, 100, t) for t in (0, 50, 100, 500)] == pytest.approx(
        [1.0, 0.55, 0.1, 0.1]
    )
    policy = linear_q([[1.0, 0.0], [0.0, 1.0]])
    obs = torch.tensor([[1.0, 0.0]]).expand(4000, 2)  # greedy action 0
    inputs, no_init = {K.OBSERVATION: obs}, torch.zeros(4000, 1, dtype=torch.bool)
    torch.manual_seed(0)
    for eps, want in [(0.0, 0.0), (0.2, 0.1), (1.0, 0.5)]:
        policy.epsilon = eps
        out, _ = policy.act(inputs, {}, no_init)
        assert out[K.ACTION].float().mean().item() == pytest.approx(want, abs=0.03)
        chosen = out[K.ACTION_VALUE].gather(-1, out[K.ACTION].unsqueeze(-1))
        torch.testing.assert_close(out[K.CHOSEN_ACTION_VALUE], chosen)
    policy.explore = False  # exploit: greedy whatever epsilon is
    out, _ = policy.act(inputs, {}, no_init)
    assert out[K.ACTION].eq(0).all()


def test_dueling_head_by_hand():
    """Q = V + A - mean(A): with V(s) = s0 + s1 and A(s) = [2 s0, 0], Q(s) = [2 s0 + s1, s1]."""
    policy = make_policy(PolicyConfig(hidden_sizes=[], dueling=True), SPECS, heads=("q",))
    head = policy.dist
    with torch.no_grad():
        head.linear.weight.copy_(torch.tensor([[2.0, 0.0], [0.0, 0.0]]))
        head.linear.bias.zero_()
        head.value.weight.copy_(torch.tensor([[1.0, 1.0]]))
        head.value.bias.zero_()
    obs = torch.tensor([[1.0, 3.0], [-2.0, 0.5]])
    out, _ = policy.act({K.OBSERVATION: obs}, {}, torch.zeros(2, 1, dtype=torch.bool))
    torch.testing.assert_close(out[K.ACTION_VALUE], torch.tensor([[5.0, 3.0], [-3.5, 0.5]]))
    # without dueling the head is the one linear layer
    assert make_policy(PolicyConfig(hidden_sizes=[]), SPECS, heads=("q",)).dist.value is None


def stored_state(spec, B, g):
    """One stored state [1, B, *shape]: random floats, or a full validity mask."""
    if spec.dtype == torch.bool:
        return torch.ones(1, B, *spec.shape, dtype=torch.bool)
    return torch.randn(1, B, *spec.shape, generator=g)


def rnn_window(kind, T=6, B=3, burn_in=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    cfg = PolicyConfig(
        kind=kind,
        hidden_size=5,
        hidden_sizes=[],
        encoder_sizes=[],
        memory={"heads": 1, "window": 2} if kind == "trxl" else None,
    )
    torch.manual_seed(seed)
    policy = make_policy(cfg, SPECS, heads=("q",))
    is_init = torch.zeros(T, B, 1, dtype=torch.bool)
    is_init[1, 0] = is_init[burn_in + 1, 1] = True  # resets inside the burn-in and after it
    done = torch.cat([is_init[1:], torch.zeros(1, B, 1, dtype=torch.bool)])
    td = TensorDict(
        {
            K.OBSERVATION: torch.randn(T, B, 2, generator=g),
            K.IS_INIT: is_init,
            K.ACTION: torch.randint(2, (T, B), generator=g),
            **{
                k: stored_state(s, B, g).expand(T, B, *s.shape)
                for k, s in policy.state_specs.items()
            },
            K.NEXT: {
                K.OBSERVATION: torch.randn(T, B, 2, generator=g),
                K.REWARD: torch.randn(T, B, 1, generator=g),
                K.TERMINATED: done,
                K.TRUNCATED: torch.zeros_like(done),
                K.DONE: done,
            },
        },
        [T, B],
    )
    return policy, td


@pytest.mark.parametrize("kind", ["gru", "lstm", "mingru", "ffm", "trxl"])
def test_burn_in_warms_the_state_without_gradient_and_stays_out_of_the_loss(kind):
    b = 2
    policy, td = rnn_window(kind, burn_in=b)
    loss = DQNLoss(policy, gamma=0.9, n_steps=2, burn_in=b)
    per_step = DQNLoss(policy, gamma=0.9, n_steps=2, burn_in=b, reduction="none")
    assert per_step.value_loss(td)[:b].eq(0).all() and per_step.value_loss(td)[b:].ne(0).all()
    assert per_step.td_error(td)[:b].eq(0).all()
    # reference: warm the state step by step (the acting path), then a window without burn-in
    state = {k: td[k][0] for k in policy.state_specs}
    with torch.no_grad(), recurrent_mode("sequential"):
        for t in range(b):
            _, state = policy.act({K.OBSERVATION: td[K.OBSERVATION][t]}, state, td[K.IS_INIT][t])
    rest = td[b:].clone()
    for k, v in state.items():
        rest.set(k, v.expand(td.shape[0] - b, *v.shape))
    ref = DQNLoss(policy, gamma=0.9, n_steps=2)  # target = online here and in ``loss``
    policy.zero_grad()
    ref.value_loss(rest).backward()
    want = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad()
    got_loss = loss.value_loss(td)
    got_loss.backward()
    torch.testing.assert_close(got_loss, ref.value_loss(rest).detach())
    for g, w in zip([p.grad for p in policy.parameters()], want, strict=True):
        torch.testing.assert_close(g, w)  # no gradient flows through the burn-in steps
    # what happens to rewards and actions during the burn-in never reaches the loss
    td[K.NEXT, K.REWARD][:b] += 100.0
    td[K.ACTION][:b] = 1 - td[K.ACTION][:b]
    torch.testing.assert_close(loss.value_loss(td), got_loss.detach())
