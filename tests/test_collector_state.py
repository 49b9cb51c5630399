"""The collector and recurrent state: carried across batches, zeros exactly at episode starts,
("next", state) at t == state at t+1, a user's own memory, and the truncation bootstrap value of
a recurrent critic. (Both collector paths identical: tests/test_step_paths.py.)"""

from __future__ import annotations

import pytest
import torch
from recurrent_helpers import masked_cartpole, recurrent_policy, time_limited_walk
from tensordict import TensorDict

from rltool import keys as K
from rltool.collectors import Collector
from rltool.modules.recurrent import recurrent_mode

KINDS = ["lstm", "gru", "sum"]  # "sum": a user's memory module with nested int64/float64 state


def _collect(policy, fpb: int, n_batches: int, use_tensordict: bool = False, seed: int = 3):
    """Clones of ``n_batches`` consecutive rollouts from a fresh masked-CartPole collector."""
    torch.manual_seed(123)  # the action samples
    c = Collector(masked_cartpole(4), policy, fpb, seed=seed, use_tensordict=use_tensordict)
    try:
        return [c.collect().clone() for _ in range(n_batches)]
    finally:
        c.close()


def _leaves(td: TensorDict) -> dict:
    return {k: td.get(k) for k in td.keys(include_nested=True, leaves_only=True)}


def _bcast(mask: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """A [T, B, 1] mask broadcast over the trailing dims of a state [T, B, *s]."""
    return mask.reshape(*mask.shape[:2], *[1] * (x.dim() - 2)).expand_as(x)


@pytest.mark.parametrize("kind", KINDS)
def test_state_carried_across_batches(kind):
    """Two rollouts of T steps are the same as one of 2T steps: the state (and prev inputs)
    carry over the frames_per_batch boundary. Only the bootstrap value at the cut differs in
    origin (an extra critic call instead of the next step's value), not in value."""
    policy = recurrent_policy(kind, masked_cartpole(1).specs)
    one = _collect(policy, 4 * 40, 1)[0]
    two = torch.cat(_collect(policy, 4 * 20, 2), 0)
    assert one[K.IS_INIT][1:].any()  # episodes did end inside
    a, b = _leaves(one), _leaves(two)
    assert a.keys() == b.keys()
    for k in a:
        if k == (K.NEXT, K.STATE_VALUE):
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-5)
        else:
            assert torch.equal(a[k], b[k]), k
    state_key = next(iter(policy.state_specs))
    assert two[state_key][20].abs().sum() > 0  # the carried state is not a fresh zero


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("use_tensordict", [False, True])
def test_zero_state_at_is_init_and_next_state_links(kind, use_tensordict):
    policy = recurrent_policy(kind, masked_cartpole(1).specs)
    b1, b2 = _collect(policy, 4 * 30, 2, use_tensordict)
    assert b1[K.IS_INIT][0].all() and b1[K.IS_INIT][1:].any() and b2[K.IS_INIT].any()
    for k in policy.state_specs:
        for b in (b1, b2):
            init, s = b[K.IS_INIT], b[k]
            assert (s[_bcast(init, s)] == 0).all()  # zeros exactly where episodes start ...
            live = s.flatten(2).ne(0).any(-1)  # ... and a non-zero state everywhere else
            assert torch.equal(live, ~init.squeeze(-1))
            # the state after step t is the state before step t+1, unless the episode ended
            done = b[K.NEXT, K.DONE][:-1]
            nxt, following = b[K.nxt(k)][:-1], s[1:]
            keep = _bcast(~done, nxt)
            assert torch.equal(nxt[keep], following[keep])
        carried = ~b1[K.NEXT, K.DONE][-1]  # ... also across the batch boundary
        assert torch.equal(b1[K.nxt(k)][-1][carried.squeeze(-1)], b2[k][0][carried.squeeze(-1)])


def test_custom_memory_state_is_declared_not_assumed():
    """The user's memory's keys, shapes and dtypes reach the rollout as declared."""
    policy = recurrent_policy("sum", masked_cartpole(1).specs)
    b = _collect(policy, 4 * 10, 1)[0]
    want = {
        ("memory", "map"): (torch.float64, (10, 4, 2, 6)),
        ("memory", "count"): (torch.int64, (10, 4, 1)),
        ("critic_memory", "map"): (torch.float64, (10, 4, 2, 6)),
    }
    for k, (dtype, shape) in want.items():
        for key in (k, K.nxt(k)):
            assert b[key].dtype == dtype and tuple(b[key].shape) == shape, key
    assert not any("recurrent_state" in str(k) for k in b.keys(include_nested=True))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shared", [False, True])
def test_truncation_value_uses_final_obs_and_state_after_step(kind, shared):
    """On a walk truncated every 5 steps, ("next", "state_value") at a truncated step equals the
    critic replayed from the episode's start (temporal mode, zero state) over its observations
    and then the true final observation, with prev_action/prev_reward of the last step."""
    torch.manual_seed(0)
    env = time_limited_walk(num_envs=2, limit=5)
    policy = recurrent_policy(kind, env.specs, shared=shared)
    c = Collector(env, policy, 2 * 12, seed=1)
    b = c.collect().clone()
    c.close()
    trunc = b[K.NEXT, K.TRUNCATED].squeeze(-1)
    assert torch.equal(trunc.nonzero()[:, 0].unique(), torch.tensor([4, 9]))
    assert not b[K.NEXT, K.TERMINATED].any()
    for t, e in trunc.nonzero().tolist():
        ep = b[t - 4 : t + 1, e : e + 1]
        final = TensorDict(
            {
                K.OBSERVATION: ep[K.NEXT, K.OBSERVATION][-1:],
                K.IS_INIT: torch.zeros(1, 1, 1, dtype=torch.bool),
                K.PREV_ACTION: ep[K.ACTION][-1:],
                K.PREV_REWARD: ep[K.NEXT, K.REWARD][-1:],
                K.ACTION: ep[K.ACTION][-1:],
            },
            [1, 1],
        )
        replay = torch.cat([ep.select(*final.keys(True, True)), final], 0)
        for k, s in policy.state_specs.items():  # only t=0 is read: a zero state
            replay.set(k, s.zeros(6, 1))
        assert replay[K.IS_INIT][0].all()
        with torch.no_grad(), recurrent_mode("temporal"):
            value = policy.evaluate(replay)[K.STATE_VALUE][-1, 0]
        stored = b[K.NEXT, K.STATE_VALUE][t, e]
        torch.testing.assert_close(stored, value, rtol=1e-5, atol=1e-6)
        if t + 1 < b.shape[0]:  # not the reset observation's value that follows
            assert (stored - b[K.STATE_VALUE][t + 1, e]).abs() > 1e-4
    # elsewhere the bootstrap is the next step's value
    following = b[K.STATE_VALUE][1:][~trunc[:-1]]
    assert torch.equal(b[K.NEXT, K.STATE_VALUE][:-1][~trunc[:-1]], following)
