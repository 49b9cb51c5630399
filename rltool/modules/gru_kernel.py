"""A GRU layer's sequence on CPU with a hand-written backward: ~2x torch's CPU GRU.

torch runs a GRU on CPU as a loop of small autograd ops (no oneDNN kernel, unlike the LSTM): its
backward replays ~11 autograd nodes per time step and transposes the recurrent weight at every
step. Here the input projection is one matmul outside (autograd's), and the recurrence is one
:class:`torch.autograd.Function`: per step 5 ops forward and 3 backward, every per-step factor of
the backward that does not depend on the incoming gradient computed once over all steps, and the
recurrent weight's gradient one matmul over all steps at the end.

The maths is torch's GRU (gates in the order r, z, n)::

    r = sigmoid(gi_r + W_hr h + b_hr)     z = sigmoid(gi_z + W_hz h + b_hz)
    n = tanh(gi_n + r * (W_hn h + b_hn))  h' = (1 - z) * n + z * h = lerp(n, h, z)

with gi = W_i x + b_i. Results equal torch's to rounding (tests/test_gru_kernel.py, float64:
1e-10). GRUModule uses it when ``policy.memory.kernel=rltool``.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


class _GRU(torch.autograd.Function):
    """gi [T, N, 3H] (the input projections, b_ih included), h0 [N, H], w_hh [3H, H], b_hh [3H]
    -> y [T, N, H] (the state after each step)."""

    @staticmethod
    def forward(ctx, gi, h0, w_hh, b_hh):
        steps, n, three_h = gi.shape
        hid = three_h // 3
        # g_t = [r', z', W_hn h + b_hn] (primes: before the sigmoids) in one op per step:
        # addmm(c_t, h, W_hh^T) with c_t = [gi_r + b_hr, gi_z + b_hz, b_hn]
        b_n = b_hh[2 * hid :].expand(steps, n, hid)
        c = torch.cat([gi[..., : 2 * hid] + b_hh[: 2 * hid], b_n], -1)
        g, new, y = torch.empty_like(c), gi.new_empty(steps, n, hid), gi.new_empty(steps, n, hid)
        per_step = (  # the per-step views taken once: indexing in the loop costs as much
            c.unbind(0), g.unbind(0), g[..., : 2 * hid].unbind(0), g[..., :hid].unbind(0),
            g[..., hid : 2 * hid].unbind(0), g[..., 2 * hid :].unbind(0),
            gi[..., 2 * hid :].unbind(0), new.unbind(0), y.unbind(0),
        )  # fmt: skip
        w_t, h = w_hh.t(), h0
        for c_t, g_t, rz_t, r_t, z_t, ghn_t, gin_t, n_t, y_t in zip(*per_step, strict=True):
            torch.addmm(c_t, h, w_t, out=g_t)
            rz_t.sigmoid_()
            torch.addcmul(gin_t, r_t, ghn_t, out=n_t).tanh_()
            h = torch.lerp(n_t, h, z_t, out=y_t)  # n + z (h - n)
        ctx.save_for_backward(h0, w_hh, y, g, new)
        return y

    @staticmethod
    def backward(ctx, dy):
        h0, w_hh, y, g, new = ctx.saved_tensors
        steps, n, hid = y.shape
        r, z, ghn = g[..., :hid], g[..., hid : 2 * hid], g[..., 2 * hid :]
        h_prev = torch.cat([h0.unsqueeze(0), y[:-1]])
        # dh_t, the gradient reaching h_t, enters its step's backward only as a factor:
        # d[r', z', W_hn h + b_hn] = dh * q, the tanh's argument gets dh (1 - z)(1 - n^2) and
        # h_{t-1} gets dh z + d[...] W_hh: q and the rest for all steps at once, before the loop
        to_a = (1 - z) * (1 - new * new)
        q = torch.stack([to_a * ghn * r * (1 - r), (h_prev - new) * z * (1 - z), to_a * r], 2)
        dgh = torch.empty(steps, n, 3, hid, dtype=y.dtype, device=y.device)
        flat = dgh.view(steps, n, 3 * hid)
        dh = torch.empty_like(y)
        dh[-1] = dy[-1]
        views = (dy.unbind(0), dh.unbind(0), dh.unsqueeze(2).unbind(0), z.unbind(0))
        dy_, dh_, dh3, z_, q_, dgh_, flat_ = views + (q.unbind(0), dgh.unbind(0), flat.unbind(0))
        torch.mul(dh3[-1], q_[-1], out=dgh_[-1])
        for t in range(steps - 2, -1, -1):
            dh_in = torch.addcmul(dy_[t], dh_[t + 1], z_[t + 1])
            torch.addmm(dh_in, flat_[t + 1], w_hh, out=dh_[t])
            torch.mul(dh3[t], q_[t], out=dgh_[t])
        dh0 = torch.addmm(dh[0] * z[0], flat[0], w_hh)
        dgi = torch.cat([flat[..., : 2 * hid], dh * to_a], -1)
        flat = flat.view(-1, 3 * hid)
        return dgi, dh0, flat.t() @ h_prev.reshape(-1, hid), flat.sum(0)


def gru_sequence(x, h0, w_ih, w_hh, b_ih, b_hh):
    """One GRU layer over a sequence: x [T, N, F], h0 [1, N, H] -> y [T, N, H], h_T [1, N, H];
    ``torch.gru``'s maths. Without gradients (acting, evaluation) it is ``torch.gru``."""
    weights = (w_ih, w_hh, b_ih, b_hh)
    if not torch.is_grad_enabled() or not any(t.requires_grad for t in (x, h0, *weights)):
        y, h = torch.gru(x, h0, weights, True, 1, 0.0, False, False, False)
        return y, h
    y = _GRU.apply(F.linear(x, w_ih, b_ih), h0[0], w_hh, b_hh)
    return y, y[-1:]
