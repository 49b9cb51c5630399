"""rltool's CPU GRU sequence (modules/gru_kernel.py) against torch.gru: outputs and the gradients
of x, h0 and every weight in float64, torch's own gradcheck, and the grad-free path."""

import pytest
import torch
from torch import nn

from rltool.config import PolicyConfig
from rltool.errors import ConfigError
from rltool.modules.gru_kernel import gru_sequence, gru_sequences
from rltool.modules.registry import build_memory

TOL = dict(rtol=0, atol=1e-10)


def layer_and_inputs(steps, n, f, h, seed=0, wide=True):
    torch.manual_seed(seed)
    layer = nn.GRU(f, h).double()
    for p in layer.parameters() if wide else ():  # beyond nn.GRU's init: gates away from 0.5
        nn.init.uniform_(p, -1.5, 1.5)
    x = torch.randn(steps, n, f, dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, n, h, dtype=torch.float64, requires_grad=True)
    weights = (layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0)
    return layer, x, h0, weights


@pytest.mark.parametrize("shape", [(9, 4, 3, 5), (1, 3, 2, 4), (6, 1, 1, 1), (17, 2, 7, 3)])
def test_outputs_and_every_gradient_equal_torch_gru(shape):
    steps, n, f, h = shape
    layer, x, h0, weights = layer_and_inputs(steps, n, f, h)
    g = torch.Generator().manual_seed(1)
    gy = torch.randn(steps, n, h, dtype=torch.float64, generator=g)
    gh = torch.randn(1, n, h, dtype=torch.float64, generator=g)
    wrt = (x, h0, *weights)
    y, hn = gru_sequence(x, h0, *weights)
    grads = torch.autograd.grad((gy * y).sum() + (gh * hn).sum(), wrt)
    y_ref, hn_ref = layer(x, h0)
    grads_ref = torch.autograd.grad((gy * y_ref).sum() + (gh * hn_ref).sum(), wrt)
    torch.testing.assert_close(y, y_ref, **TOL)
    torch.testing.assert_close(hn, hn_ref, **TOL)
    for a, b in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(a, b, **TOL)


def test_gradcheck():
    """Finite differences agree with the hand-written backward (and its second use of y)."""
    _, x, h0, weights = layer_and_inputs(5, 2, 3, 4, seed=2)
    assert torch.autograd.gradcheck(lambda *a: gru_sequence(*a), (x, h0, *weights))


def test_without_gradients_it_is_torch_gru_bit_for_bit():
    layer, x, h0, weights = layer_and_inputs(8, 3, 4, 6, seed=3)
    with torch.no_grad():
        y, hn = gru_sequence(x, h0, *weights)
        y_ref, hn_ref = layer(x, h0)
    assert torch.equal(y, y_ref) and torch.equal(hn, hn_ref)


def test_float32_stays_close_to_torch():
    """The training dtype, nn.GRU's init: the two differ only by rounding."""
    layer, x, h0, weights = layer_and_inputs(64, 8, 16, 32, seed=4, wide=False)
    layer, x, h0 = layer.float(), x.detach().float().requires_grad_(), h0.detach().float()
    weights = (layer.weight_ih_l0, layer.weight_hh_l0, layer.bias_ih_l0, layer.bias_hh_l0)
    y, _ = gru_sequence(x, h0, *weights)
    y_ref, _ = layer(x, h0)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-5)
    gx = torch.autograd.grad(y.sum(), x)[0]
    gx_ref = torch.autograd.grad(y_ref.sum(), x)[0]
    torch.testing.assert_close(gx, gx_ref, rtol=1e-4, atol=1e-4)


def test_the_config_picks_the_kernel_and_refuses_others():
    cfg = PolicyConfig(kind="gru", memory={"kernel": "torch"})
    assert build_memory(cfg, 3).kernel == "torch"
    assert build_memory(PolicyConfig(kind="gru"), 3).kernel == "rltool"
    with pytest.raises(ConfigError, match="policy.memory.kernel"):
        PolicyConfig(kind="gru", memory={"kernel": "cudnn"})


def test_several_grus_in_one_loop_equal_each_alone():
    """gru_sequences of two GRUs (own inputs, widths of input, weights and h0) == torch.gru of
    each: outputs and every gradient, float64."""
    la, xa, ha, wa = layer_and_inputs(9, 3, 4, 5, seed=5)
    lc, xc, hc, wc = layer_and_inputs(9, 3, 2, 5, seed=6)
    g = torch.Generator().manual_seed(7)
    gy = [torch.randn(9, 3, 5, dtype=torch.float64, generator=g) for _ in range(2)]
    wrt = (xa, ha, *wa, xc, hc, *wc)
    (ya, hna), (yc, hnc) = gru_sequences([xa, xc], [ha, hc], [wa, wc])
    grads = torch.autograd.grad(
        (gy[0] * ya).sum() + (gy[1] * yc).sum() + hna.sum() * hnc.sum(), wrt
    )
    (ya_ref, hna_ref), (yc_ref, hnc_ref) = la(xa, ha), lc(xc, hc)
    loss_ref = (gy[0] * ya_ref).sum() + (gy[1] * yc_ref).sum() + hna_ref.sum() * hnc_ref.sum()
    for a, b in zip(
        (ya, hna, yc, hnc, *grads),
        (ya_ref, hna_ref, yc_ref, hnc_ref, *torch.autograd.grad(loss_ref, wrt)),
        strict=True,
    ):
        torch.testing.assert_close(a, b, **TOL)
