"""PPO's sub-losses against hand-computed values, each reduction, masks, diagnostics."""

import math
from types import SimpleNamespace

import pytest
import torch
from conftest import make_cfg
from tensordict import TensorDict

from rltool import keys as K
from rltool.losses import PPOLoss
from rltool.optim.guard import NonFiniteGuard
from rltool.train import gradient_step


class FixedPolicy(torch.nn.Module):
    """evaluate() returns fixed log-probs, values and entropies (one learnable scale)."""

    def __init__(self, logp, value, entropy):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))
        self.logp, self.value, self.entropy = logp, value, entropy

    def evaluate(self, td):
        return {
            K.SAMPLE_LOG_PROB: self.logp * self.scale,
            K.STATE_VALUE: self.value * self.scale,
            "entropy": self.entropy * self.scale,
        }


def batch():
    # [T=2, B=2]
    old_logp = torch.log(torch.tensor([[0.5, 0.5], [0.25, 0.8]]))
    new_logp = torch.log(torch.tensor([[0.6, 0.4], [0.25, 0.2]]))
    adv = torch.tensor([[1.0, -1.0], [2.0, 0.5]])
    td = TensorDict(
        {
            K.SAMPLE_LOG_PROB: old_logp,
            K.ADVANTAGE: adv.unsqueeze(-1),
            K.STATE_VALUE: torch.tensor([[[0.0], [1.0]], [[2.0], [3.0]]]),
            K.VALUE_TARGET: torch.tensor([[[1.0], [1.0]], [[1.0], [5.0]]]),
            K.ACTION: torch.zeros(2, 2, dtype=torch.int64),
        },
        [2, 2],
    )
    pol = FixedPolicy(
        new_logp,
        torch.tensor([[[0.5], [1.0]], [[2.0], [2.0]]]),
        torch.tensor([[0.1, 0.2], [0.3, 0.4]]),
    )
    return td, pol


def expected_actor(eps=0.2):
    ratios = [[0.6 / 0.5, 0.4 / 0.5], [1.0, 0.2 / 0.8]]
    adv = [[1.0, -1.0], [2.0, 0.5]]
    out = []
    for rr, aa in zip(ratios, adv, strict=True):
        row = []
        for r, a in zip(rr, aa, strict=True):
            row.append(-min(r * a, min(max(r, 1 - eps), 1 + eps) * a))
        out.append(row)
    return torch.tensor(out)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_actor_loss_hand_computed(reduction):
    td, pol = batch()
    loss = PPOLoss(pol, clip_epsilon=0.2, normalize_advantage=False, reduction=reduction)
    want = expected_actor()
    want = {"mean": want.mean(), "sum": want.sum(), "none": want}[reduction]
    assert torch.allclose(loss.actor_loss(td), want, atol=1e-6)


def test_value_loss_and_clipping_hand_computed():
    td, pol = batch()
    loss = PPOLoss(pol, value_coef=0.5, reduction="none")
    err = torch.tensor([[0.25, 0.0], [1.0, 9.0]])
    assert torch.allclose(loss.value_loss(td), 0.25 * err)
    clipped = PPOLoss(pol, value_coef=1.0, clip_value=0.1, reduction="none")
    # V clipped to old +- 0.1: [0.1, 1.0, 2.0, 2.9]; max of the squared errors
    want = torch.tensor([[max(0.25, 0.81), 0.0], [1.0, max(9.0, 4.41)]])
    assert torch.allclose(clipped.value_loss(td), 0.5 * want)


def test_entropy_loss_and_reductions_with_mask():
    td, pol = batch()
    td[K.MASK] = torch.tensor([[[True], [False]], [[True], [True]]])
    loss = PPOLoss(pol, entropy_coef=0.1, reduction="none")
    none = loss.entropy_loss(td)
    assert torch.allclose(none, torch.tensor([[-0.01, 0.0], [-0.03, -0.04]]))
    loss.reduction = "sum"
    assert torch.allclose(loss.entropy_loss(td), torch.tensor(-0.08))
    loss.reduction = "mean"  # over the 3 masked-in entries only
    assert torch.allclose(loss.entropy_loss(td), torch.tensor(-0.08 / 3))


def test_advantage_normalisation():
    td, pol = batch()
    loss = PPOLoss(pol, normalize_advantage=True, clip_epsilon=100.0, reduction="none")
    adv = td[K.ADVANTAGE].squeeze(-1)
    norm = (adv - adv.mean()) / (adv.std() + 1e-8)
    ratio = (pol.logp - td[K.SAMPLE_LOG_PROB]).exp()
    assert torch.allclose(loss.actor_loss(td), -ratio * norm, atol=1e-6)


class RecordingGuard(NonFiniteGuard):
    """The real guard, keeping the loss each step was asked to minimise."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def allows(self, loss, grad_norm):
        self.losses.append(loss.detach().clone())
        return super().allows(loss, grad_norm)


def test_the_loop_steps_on_the_sum_of_the_loss_terms_and_reports_diagnostics():
    td, pol = batch()
    loss = PPOLoss(pol, clip_epsilon=0.15, entropy_coef=0.01, normalize_advantage=False)
    out = loss(td)
    # by hand, means over the 4 entries. Actor: min(r A, clip(r, 0.85, 1.15) A) with ratios
    # 1.2, 0.8, 1.0, 0.25 and advantages 1, -1, 2, 0.5. Value: value_coef * 0.5 * (V - target)^2.
    actor = -(1.15 - 0.85 + 2.0 + 0.125) / 4
    value = 0.5 * 0.5 * (0.25 + 0.0 + 1.0 + 9.0) / 4
    entropy = -0.01 * (0.1 + 0.2 + 0.3 + 0.4) / 4
    for k, want in (("loss_actor", actor), ("loss_value", value), ("loss_entropy", entropy)):
        assert math.isclose(out[k].item(), want, rel_tol=1e-6), k

    guard = RecordingGuard()
    optimizer = torch.optim.SGD(pol.parameters(), lr=0.1)
    cfg = make_cfg("optim.max_grad_norm=null")
    run = SimpleNamespace(guard=guard, optimizer=optimizer, policy=pol, cfg=cfg, grad_hook=None)
    gradient_step(run, out)  # the training loop's gradient step
    (total,) = guard.losses
    assert math.isclose(total.item(), actor + value + entropy, rel_tol=1e-6)  # 0.031875
    assert pol.scale.item() != 1.0  # and it stepped on it

    log_ratio = pol.logp - td[K.SAMPLE_LOG_PROB]
    assert math.isclose(
        out["approx_kl"].item(), ((log_ratio.exp() - 1) - log_ratio).mean().item(), rel_tol=1e-6
    )
    assert out["clip_fraction"].item() == 0.75  # ratios 1.2, 0.8, 1.0, 0.25 vs eps 0.15


@pytest.mark.parametrize("anneal", [False, True])
def test_the_entropy_bonus_decays_with_the_remaining_budget_when_annealed(anneal):
    """anneal_entropy scales entropy_coef by (1 - progress), as anneal_clip does the clip: the
    loss term the loop steps on is -coef * (1 - progress) * entropy."""
    from rltool.train import build

    cfg = make_cfg(
        "env=cartpole",
        "env.num_envs=2",
        "collector.frames_per_batch=16",
        "loss.epochs=1",
        "loss.num_minibatches=1",
        "loss.entropy_coef=0.1",
        f"loss.anneal_entropy={anneal}",
    )
    run = build(cfg)
    batch, seen = run.collector.collect(), []
    run.algo.update(batch, 0.75, 16, lambda terms, apply=True: seen.append(terms))
    run.collector.close()
    run.eval_env.close()
    scale = 0.25 if anneal else 1.0
    (terms,) = seen
    assert terms["loss_entropy"].item() == pytest.approx(-0.1 * scale * terms["entropy"].item())
