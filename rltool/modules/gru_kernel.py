"""GRU layers' sequences on CPU with a hand-written backward: ~2x torch's CPU GRU, and several
GRUs of the same shape over the same steps (a policy's actor and critic) in one loop.

torch runs a GRU on CPU as a loop of small autograd ops (no oneDNN kernel, unlike the LSTM): its
backward replays ~11 autograd nodes per time step and transposes the recurrent weight at every
step. Here the input projection is one matmul outside (autograd's), and the recurrence is one
:class:`torch.autograd.Function`: per step 5 ops forward and 2 backward, every per-step factor of
the backward that does not depend on the incoming gradient computed once over all steps, and the
recurrent weight's gradient one matmul over all steps at the end. At rltool's sizes (hidden 64, a
few envs) each op costs its dispatch, not its arithmetic, so G GRUs stacked on a leading group
dim (batched matmuls) cost about what one does: the actor's and the critic's GRU run as one.

The maths is torch's GRU (gates in the order r, z, n)::

    r = sigmoid(gi_r + W_hr h + b_hr)     z = sigmoid(gi_z + W_hz h + b_hz)
    n = tanh(gi_n + r * (W_hn h + b_hn))  h' = (1 - z) * n + z * h = lerp(n, h, z)

with gi = W_i x + b_i. Results equal torch's to rounding (tests/test_gru_kernel.py, float64:
1e-10). GRUModule uses it on CPU when training with ``policy.memory.kernel=rltool``.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


class _GRU(torch.autograd.Function):
    """G GRUs at once: gi [T, G, N, 3H] (the input projections, b_ih included), h0 [G, N, H],
    w_hh [G, 3H, H], b_hh [G, 3H] -> y [T, G, N, H] (the state after each step)."""

    @staticmethod
    def forward(ctx, gi, h0, w_hh, b_hh):
        steps, groups, n, three_h = gi.shape
        hid = three_h // 3
        # g_t = [r', z', W_hn h + b_hn] (primes: before the sigmoids) in one op per step:
        # baddbmm(c_t, h, W_hh^T) with c_t = [gi_r + b_hr, gi_z + b_hz, b_hn]
        b = b_hh.unsqueeze(1)  # [G, 1, 3H]
        c = torch.cat(
            [
                gi[..., : 2 * hid] + b[..., : 2 * hid],
                b[..., 2 * hid :].expand_as(gi[..., 2 * hid :]),
            ],
            -1,
        )
        g, new, y = (
            torch.empty_like(c),
            gi.new_empty(steps, groups, n, hid),
            gi.new_empty(steps, groups, n, hid),
        )
        per_step = (  # the per-step views taken once: indexing in the loop costs as much
            c.unbind(0), g.unbind(0), g[..., : 2 * hid].unbind(0), g[..., :hid].unbind(0),
            g[..., hid : 2 * hid].unbind(0), g[..., 2 * hid :].unbind(0),
            gi[..., 2 * hid :].unbind(0), new.unbind(0), y.unbind(0),
        )  # fmt: skip
        w_t, h = w_hh.transpose(1, 2), h0
        for c_t, g_t, rz_t, r_t, z_t, ghn_t, gin_t, n_t, y_t in zip(*per_step, strict=True):
            torch.baddbmm(c_t, h, w_t, out=g_t)
            rz_t.sigmoid_()
            torch.addcmul(gin_t, r_t, ghn_t, out=n_t).tanh_()
            h = torch.lerp(n_t, h, z_t, out=y_t)  # n + z (h - n)
        ctx.save_for_backward(h0, w_hh, y, g, new)
        return y

    @staticmethod
    def backward(ctx, dy):
        h0, w_hh, y, g, new = ctx.saved_tensors
        steps, groups, n, hid = y.shape
        r, z, ghn = g[..., :hid], g[..., hid : 2 * hid], g[..., 2 * hid :]
        h_prev = torch.cat([h0.unsqueeze(0), y[:-1]])
        # dh_t, the gradient reaching h_t, enters its step's backward only as a factor: e_t =
        # dh_t * [q_r, q_z, q_n, z] holds d[r', z', W_hn h + b_hn] and the share of h_{t-1}
        # through z, so h_{t-1} gets dy_{t-1} + e_t [W_hh; I]: two ops a step, every factor
        # computed for all steps at once, before the loop
        to_a = (1 - z) * (1 - new * new)
        q = torch.stack([to_a * ghn * r * (1 - r), (h_prev - new) * z * (1 - z), to_a * r, z], -2)
        w_ext = torch.cat(
            [w_hh, torch.eye(hid, dtype=w_hh.dtype, device=w_hh.device).expand(groups, hid, hid)], 1
        )
        e = torch.empty(steps, groups, n, 4, hid, dtype=y.dtype, device=y.device)
        flat = e.view(steps, groups, n, 4 * hid)
        dh = torch.empty_like(y)
        dh[-1] = dy[-1]
        dy_, dh_, dh4, q_, e_, flat_ = (
            dy.unbind(0), dh.unbind(0), dh.unsqueeze(-2).unbind(0), q.unbind(0), e.unbind(0),
            flat.unbind(0),
        )  # fmt: skip
        torch.mul(dh4[-1], q_[-1], out=e_[-1])
        for t in range(steps - 2, -1, -1):
            torch.baddbmm(dy_[t], flat_[t + 1], w_ext, out=dh_[t])
            torch.mul(dh4[t], q_[t], out=e_[t])
        dh0 = flat[0] @ w_ext
        dg = e[..., :3, :].reshape(steps, groups, n, 3 * hid)  # d[r', z', W_hn h + b_hn]
        dgi = torch.cat([dg[..., : 2 * hid], dh * to_a], -1)
        by_group = dg.transpose(0, 1).reshape(groups, steps * n, 3 * hid)
        dw = by_group.transpose(1, 2) @ h_prev.transpose(0, 1).reshape(groups, steps * n, hid)
        return dgi, dh0, dw, by_group.sum(1)


def _no_grad(*tensors) -> bool:
    return not torch.is_grad_enabled() or not any(t.requires_grad for t in tensors)


def gru_sequences(xs, h0s, weights):
    """G GRU layers of the same sizes over the same steps: xs [T, N, F_g] each, h0s [1, N, H]
    each, weights (w_ih, w_hh, b_ih, b_hh) each -> [(y [T, N, H], h_T [1, N, H])] per layer;
    ``torch.gru``'s maths. Without gradients (acting, evaluation) each is ``torch.gru``."""
    if _no_grad(*xs, *h0s, *(w for ws in weights for w in ws)):
        return [
            tuple(torch.gru(x, h0, ws, True, 1, 0.0, False, False, False))
            for x, h0, ws in zip(xs, h0s, weights, strict=True)
        ]
    gi = torch.stack([F.linear(x, w[0], w[2]) for x, w in zip(xs, weights, strict=True)], 1)
    h0 = torch.cat(h0s)
    w_hh, b_hh = torch.stack([w[1] for w in weights]), torch.stack([w[3] for w in weights])
    y = _GRU.apply(gi, h0, w_hh, b_hh)
    return [(y[:, i], y[-1:, i]) for i in range(len(xs))]


def gru_sequence(x, h0, w_ih, w_hh, b_ih, b_hh):
    """One GRU layer over a sequence: x [T, N, F], h0 [1, N, H] -> y [T, N, H], h_T [1, N, H]."""
    return gru_sequences([x], [h0], [(w_ih, w_hh, b_ih, b_hh)])[0]
