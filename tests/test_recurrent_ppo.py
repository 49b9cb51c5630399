"""Recurrent PPO end to end: re-evaluating a collected rollout in temporal mode reproduces what
the collector stored (first-epoch ratio 1, approx KL 0), training steps run for LSTM, GRU, minGRU,
FFM, TrXL and a user's memory, and bad recurrent configs fail with one line."""

from __future__ import annotations

import pytest
import torch
from recurrent_helpers import masked_cartpole, recurrent_policy

from rltool import keys as K
from rltool.collectors import Collector
from rltool.data import minibatches, resolve_sampler
from rltool.losses import PPOLoss, add_gae

CASES = [
    ("lstm", False, {}),
    ("lstm", True, {}),
    ("gru", False, {}),
    ("gru", True, {}),
    ("gru", True, {"memory": {"kernel": "torch"}}),  # the loss on torch's GRU
    ("gru", False, {"memory": {"kernel": "torch"}}),  # torch's GRU, actor and critic apart
    ("lstm", False, {"num_layers": 2}),
    ("gru", False, {"recurrent_mode": "sequential"}),  # the loss runs the step loop
    ("sum", False, {}),  # a user's memory module
    ("mingru", False, {}),
    ("ffm", False, {}),
    ("trxl", False, {}),
    ("trxl", True, {"memory": {"window": 4}}),  # the window fills and slides within the rollout
]


def _second_rollout(policy):
    """The second rollout of a masked-CartPole collector: it starts from carried, non-zero
    states, and holds episode starts inside it."""
    torch.manual_seed(7)
    c = Collector(masked_cartpole(4), policy, 4 * 32, seed=5)
    c.collect()
    batch = c.collect().clone()
    c.close()
    assert batch[K.IS_INIT][1:].any()
    assert not batch[K.IS_INIT][0].all()
    return add_gae(batch, 0.98, 0.8)


@pytest.mark.parametrize(("kind", "shared", "kw"), CASES)
def test_first_epoch_ratio_is_one(kind, shared, kw):
    policy = recurrent_policy(kind, masked_cartpole(1).specs, shared=shared, **kw)
    batch = _second_rollout(policy)
    loss = PPOLoss(policy)
    policy.train()  # as in the update
    sampler = resolve_sampler("auto", recurrent=bool(policy.state_specs))
    assert sampler == "sequences"
    gen = torch.Generator().manual_seed(0)
    for mb in minibatches(batch, 2, sampler, gen):
        ev = loss.evaluate(mb)
        torch.testing.assert_close(ev[K.SAMPLE_LOG_PROB], mb[K.SAMPLE_LOG_PROB], **_tol())
        torch.testing.assert_close(ev[K.STATE_VALUE], mb[K.STATE_VALUE], **_tol())
        for k in ev.keys() & {K.LOGITS}:
            torch.testing.assert_close(ev[k], mb[k], **_tol())
        terms = loss(mb)
        assert terms["approx_kl"].abs() < 1e-6  # float32 rounding of exp(x) - 1 - x
        assert terms["clip_fraction"] == 0
    # the check has teeth: replaying without the carried state does change the numbers
    lost = batch.clone()
    for k in policy.state_specs:
        lost[k].zero_()
    with torch.no_grad():
        drift = (loss.evaluate(lost)[K.STATE_VALUE] - batch[K.STATE_VALUE]).abs().max()
    assert drift > 1e-3  # (the value: at init the actor's head is scaled down 100x)


def _tol():
    return {"rtol": 1e-5, "atol": 1e-5}


@pytest.mark.parametrize("kind", ["lstm", "gru", "sum", "mingru", "ffm", "trxl"])
def test_update_steps_reduce_the_loss_on_a_fixed_batch(kind):
    """A few optimiser steps on one rollout lower the PPO loss; gradients reach the memory."""
    policy = recurrent_policy(kind, masked_cartpole(1).specs)
    batch = _second_rollout(policy)
    loss = PPOLoss(policy)
    opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
    totals = []
    for _ in range(15):
        terms = loss(batch)
        total = terms["loss_actor"] + terms["loss_value"]
        opt.zero_grad()
        total.backward()
        opt.step()
        totals.append(total.item())
    memory = policy.actor_torso.rnn
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in memory.parameters())
    assert totals[-1] < totals[0]


BAD = [
    (["loss.sampler=steps"], "loss.sampler='steps'"),
    (["policy.hidden_size=0"], "policy.hidden_size=0"),
    (["policy.recurrent_mode=temporal"], "policy.recurrent_mode='temporal'"),
    (["policy.inputs=[observation,prev_obs]"], "policy.inputs=['observation', 'prev_obs']"),
]


@pytest.mark.parametrize(("overrides", "names"), BAD)
def test_bad_recurrent_config_is_one_line_exit_2(tmp_path, cli, overrides, names):
    p = cli(
        "train",
        "env=cartpole_pomdp",
        "policy=lstm",
        "total_frames=256",
        f"hydra.run.dir={tmp_path / 'run'}",
        *overrides,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert names in lines[0] and "Traceback" not in p.stderr
    assert not (tmp_path / "run" / "metrics.csv").exists()
