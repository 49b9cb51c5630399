"""GAE against a plain-Python reference, with terminations and truncations."""

import torch

from rltool.losses.returns import gae


def reference_gae(r, v, nv, term, done, gamma, lam):
    T, B = len(r), len(r[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        last = 0.0
        for t in reversed(range(T)):
            boot = 0.0 if term[t][b] else nv[t][b]
            delta = r[t][b] + gamma * boot - v[t][b]
            last = delta + gamma * lam * (0.0 if done[t][b] else last)
            adv[t][b] = last
    return adv


def test_gae_matches_reference_with_termination_and_truncation():
    g = torch.Generator().manual_seed(0)
    T, B = 9, 3
    r, v, nv = (torch.randn(T, B, 1, generator=g, dtype=torch.float64) for _ in range(3))
    term = torch.zeros(T, B, 1, dtype=torch.bool)
    trunc = torch.zeros(T, B, 1, dtype=torch.bool)
    term[2, 0] = term[8, 1] = True
    trunc[4, 0] = trunc[5, 2] = True
    done = term | trunc
    adv, target = gae(r, v, nv, term, done, 0.9, 0.8)
    ref = reference_gae(
        r.squeeze(-1).tolist(),
        v.squeeze(-1).tolist(),
        nv.squeeze(-1).tolist(),
        term.squeeze(-1).tolist(),
        done.squeeze(-1).tolist(),
        0.9,
        0.8,
    )
    assert torch.allclose(adv.squeeze(-1), torch.tensor(ref, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(target, adv + v)


def test_truncated_step_bootstraps_from_final_value_terminated_from_zero():
    r = torch.ones(1, 2, 1)
    v = torch.zeros(1, 2, 1)
    nv = torch.full((1, 2, 1), 10.0)
    term = torch.tensor([[[True], [False]]])
    done = torch.ones(1, 2, 1, dtype=torch.bool)
    adv, _ = gae(r, v, nv, term, done, 0.5, 0.9)
    assert adv.flatten().tolist() == [1.0, 6.0]  # 1 + 0 ; 1 + 0.5 * 10
