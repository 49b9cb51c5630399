"""PPO's ``loss.refresh_states``: one epoch is bit-equal to off; the first epoch keeps the
collected states (ratio 1) and every later epoch starts from t=0 states recomputed with the
current parameters; those equal a step-by-step replay of the previous rollout; a rollout that
does not continue the kept one keeps its stored states."""

from __future__ import annotations

import pytest
import torch
from conftest import make_cfg
from recurrent_helpers import masked_cartpole, recording_step, recurrent_policy

from rltool import keys as K
from rltool.algos.ppo.algorithm import PPO
from rltool.collectors import Collector

KINDS = [  # (kind, shared torso): every built-in memory, a user's one, a separate critic torso
    ("lstm", False),
    ("lstm", True),
    ("gru", False),
    ("gru", True),
    ("mingru", False),
    ("ffm", False),
    ("trxl", False),
    ("sum", False),
]


def _setup(kind, refresh, epochs, shared=False):
    """A seeded policy, a 4-env masked-CartPole collector (32 steps), PPO and an optimizer."""
    cfg = make_cfg(
        "policy=gru",
        f"loss.refresh_states={str(refresh).lower()}",
        f"loss.epochs={epochs}",
        "loss.num_minibatches=1",
    )
    env = masked_cartpole(4)
    policy = recurrent_policy(kind, env.specs, shared=shared)
    algo = PPO(cfg, env, policy)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    return Collector(env, policy, 4 * 32, seed=5), algo, opt


def _train(kind, refresh, epochs, updates=2, shared=False, record=None):
    """Runs ``updates`` collect+update rounds; returns each gradient step's terms and the final
    parameters. ``record``: a list that gets each loss call's t=0 states."""
    torch.manual_seed(0)
    collector, algo, opt = _setup(kind, refresh, epochs, shared)
    steps = []

    step = recording_step(opt, steps)

    if record is not None:
        forward = algo.loss.forward
        algo.loss.forward = lambda td: (
            record.append({k: td.get(k)[0].clone() for k in algo.policy.state_specs}),
            forward(td),
        )[1]
    for _ in range(updates):
        algo.update(collector.collect(), 0.0, 0, step)
    collector.close()
    return steps, torch.cat([p.detach().reshape(-1) for p in algo.policy.parameters()])


def _equal(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_one_epoch_is_bit_equal_to_off(kind):
    """No epoch after the first: nothing refreshed, every term and parameter bit-equal."""
    on, p_on = _train(kind, True, epochs=1, updates=3)
    off, p_off = _train(kind, False, epochs=1, updates=3)
    assert len(on) == len(off) == 3
    assert all(_equal(a, b) for a, b in zip(on, off, strict=True))
    assert torch.equal(p_on, p_off)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_first_epoch_keeps_the_collected_states_later_epochs_refresh(kind):
    """Update 1 (no previous rollout) and update 2's first epoch are bit-equal to off, with
    ratio 1 (approx KL ~ 0); update 2's second epoch already differs."""
    on, _ = _train(kind, True, epochs=3)
    off, _ = _train(kind, False, epochs=3)
    assert all(_equal(a, b) for a, b in zip(on[:4], off[:4], strict=True))
    assert on[3]["approx_kl"].abs() < 1e-6 and on[3]["clip_fraction"] == 0
    assert not _equal(on[4], off[4])  # the refresh has teeth


@pytest.mark.parametrize(("kind", "shared"), [("lstm", False), ("gru", True)])
def test_the_refresh_runs_before_each_epoch_after_the_first(kind, shared):
    """The loss sees the stored t=0 states in every epoch of update 1 and in update 2's first;
    a new refreshed set before each later epoch (the parameters moved in between)."""
    seen = []
    _train(kind, True, epochs=4, shared=shared, record=seen)
    assert len(seen) == 8
    first, second = seen[:4], seen[4:]
    assert all(_equal(s, first[0]) for s in first)  # update 1: nothing to refresh from
    for a, b in zip(second, second[1:], strict=False):
        assert not _equal(a, b)  # epochs 2, 3, 4: each its own refresh
    off = []
    _train(kind, False, epochs=4, shared=shared, record=off)
    assert _equal(second[0], off[4]) and all(_equal(s, off[4]) for s in off[4:])


def _step_by_step(policy, kept):
    """The states after the last step of ``kept`` [T, B], from its stored t=0 states, by
    ``policy.act`` one step at a time (the sequential path)."""
    state = {k: kept.get(k)[0] for k in policy.state_specs}
    with torch.no_grad():
        for t in range(kept.shape[0]):
            inputs = {k: kept.get(k)[t] for k in policy.in_keys}
            _, state = policy.act(inputs, state, kept.get(K.IS_INIT)[t])
    return state


@pytest.mark.parametrize(("kind", "shared"), KINDS)
def test_refreshed_states_equal_a_step_by_step_replay(kind, shared):
    torch.manual_seed(0)
    collector, algo, opt = _setup(kind, True, epochs=2, shared=shared)

    def step(terms, apply=True):
        opt.zero_grad()
        sum(v for k, v in terms.items() if k.startswith("loss_")).backward()
        opt.step()

    algo.update(collector.collect(), 0.0, 0, step)  # the parameters move from the collector's
    kept = algo.previous
    batch = collector.collect().clone()
    collector.close()
    out = algo.refreshed(batch, kept)
    want = _step_by_step(algo.policy, kept[0])
    cont = ~batch.get(K.IS_INIT)[0].reshape(-1)
    assert cont.any()
    for k in algo.policy.state_specs:
        stored, fresh = batch.get(k)[0], out.get(k)[0]
        torch.testing.assert_close(fresh[cont], want[k][cont], rtol=1e-5, atol=1e-5)
        assert torch.equal(fresh[~cont], stored[~cont])  # a reset at t=0: as stored
        assert torch.equal(out.get(k)[1:], batch.get(k)[1:])  # only t=0 is refreshed
    k = next(iter(algo.policy.state_specs))  # (the user memory's: its float running sum)
    assert not torch.equal(out.get(k)[0][cont], batch.get(k)[0][cont])  # it has teeth


def test_only_the_columns_that_continue_the_kept_rollout_are_refreshed():
    """Column 0 starts an episode at t=0 (zeros, and the memory resets anyway), column 1's
    stored state is not where the kept rollout ended: both keep their stored states; the other
    columns are refreshed. The input batch is not changed."""
    torch.manual_seed(0)
    collector, algo, _ = _setup("lstm", True, epochs=2)
    kept = algo.keep(collector.collect())
    batch = collector.collect().clone()
    collector.close()
    with torch.no_grad():  # as after a gradient step: the refresh gives other states
        for p in algo.policy.parameters():
            p.add_(0.01 * torch.randn_like(p))
    batch.get(K.IS_INIT)[0, 0] = True
    batch.get(K.IS_INIT)[0, 1:] = False
    for k in algo.policy.state_specs:
        batch.get(k)[0, 1] += 0.5
    before = batch.clone()
    out = algo.refreshed(batch, kept)
    assert (batch == before).all()
    for k in algo.policy.state_specs:
        stored, fresh = batch.get(k)[0], out.get(k)[0]
        assert torch.equal(fresh[:2], stored[:2])
        assert not torch.equal(fresh[2:], stored[2:])
