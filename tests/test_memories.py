"""minGRU, FFM and TrXL memories: temporal mode == the sequential step loop == an independent
per-episode reference (each episode alone, batch 1, from a zero state; written here from the
papers' equations, sharing only the module's Parameters), for outputs, the states after every step
and gradients, in float64 to 1e-8 (the modes differ only in summation order: ~1e-13 seen).
Also: finite gradients with resets at t=0 and twice in a row (float32 and float64, long rollouts),
the TensorDict path, and bad TrXL settings as one ConfigError line."""

import math

import pytest
import torch
from tensordict import TensorDict
from test_recurrent import init_pattern

from rltool import keys as K
from rltool.config import PolicyConfig
from rltool.errors import ConfigError
from rltool.modules.ffm import FFMModule
from rltool.modules.mingru import MinGRUModule
from rltool.modules.recurrent import recurrent_mode
from rltool.modules.registry import build_memory
from rltool.modules.scan import chunked_scan
from rltool.modules.trxl import TrXLModule

T, LEAD, F, H = 12, (2, 4), 3, 8
TOL = dict(rtol=0, atol=1e-8)
KINDS = {
    "mingru": lambda L: MinGRUModule(F, H, L),
    "ffm": lambda L: FFMModule(F, H, L, trace_size=3, context_size=2),
    "trxl": lambda L: TrXLModule(F, H, L, window=3, heads=2),
    "trxl-long-window": lambda L: TrXLModule(F, H, L, window=20, heads=2),  # window > T
    "trxl-ungated": lambda L: TrXLModule(F, H, L, window=1, heads=4, gated=False),
}


def make(kind, num_layers=2, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    module = KINDS[kind](num_layers).to(dtype)
    with torch.no_grad():  # move the relative position biases off zero so they are tested
        for name, p in module.named_parameters():
            if name.endswith(".pos"):
                p.normal_()
    return module


def random_states(module, lead, g, dtype=torch.float64):
    """Float states ~N(0, 1); a TrXL validity mask valid for the last k of M steps (k random)."""
    out = []
    for spec in module.state_specs.values():
        if spec.dtype == torch.bool:
            k = torch.randint(0, spec.shape[0] + 1, (*lead, 1), generator=g)
            out.append(torch.arange(spec.shape[0]) >= spec.shape[0] - k)
        else:
            out.append(torch.randn(*lead, *spec.shape, generator=g, dtype=dtype).requires_grad_())
    return out


def inputs(module, seed=1, t=T, lead=LEAD, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, *lead, F, generator=g, dtype=dtype, requires_grad=True)
    return x, random_states(module, lead, g, dtype), init_pattern(seed, t, lead)


# ---- independent references: one episode, one step at a time ----
def mingru_step(module, x, state):
    h, out = x, []
    for i, layer in enumerate(module.layers):
        u, cand = (layer.weight @ h + layer.bias).chunk(2)
        z = 1 / (1 + torch.exp(-u))
        h = (1 - z) * state[0][i] + z * cand
        out.append(h)
    return h, [torch.stack(out)]


def ffm_step(module, x, state):
    """The complex decay as a rotation by omega and a shrink by exp(-|alpha|), in reals."""
    h, out = x, []
    for i, layer in enumerate(module.layers):
        v, g = (layer.pre.weight @ h + layer.pre.bias).chunk(2)
        xt = (v / (1 + torch.exp(-g)))[:, None]  # [m, 1]
        shrink = torch.exp(-layer.alpha.abs())[:, None]
        cos, sin = torch.cos(layer.omega), torch.sin(layer.omega)
        re, im = state[0][i]
        re, im = shrink * (cos * re - sin * im) + xt, shrink * (sin * re + cos * im)
        z = layer.mix(torch.cat([re, im], -1).reshape(-1))
        gate_pre, skip = layer.skip(h).chunk(2)
        gate = 1 / (1 + torch.exp(-gate_pre))
        h = layer.norm(z) * gate + skip * (1 - gate)
        out.append(torch.stack([re, im]))
    return h, [torch.stack(out)]


def attend(block, e, keys, M):
    """Attention of e [d] over keys [k, d] (the last k <= M + 1 steps, e last), from scratch."""
    d, heads = e.shape[0], block.heads
    dh = d // heads
    normed = block.norm(keys)
    q = block.q(block.norm(e)).view(heads, dh)
    kk, vv = block.kv(normed).chunk(2, -1)
    pos = block.pos[:, M + 1 - keys.shape[0] :]  # the keys sit at the window's end
    outs = []
    for hd in range(heads):
        s = kk[:, hd * dh : (hd + 1) * dh] @ q[hd] / math.sqrt(dh) + pos[hd]
        outs.append(torch.softmax(s, 0) @ vv[:, hd * dh : (hd + 1) * dh])
    return block.out(torch.cat(outs))


def trxl_step(module, x, state):
    """state: [per layer, the list of its past inputs in this episode (at most M)]."""
    M, h, new = module.window, module.proj(x), []
    for i, block in enumerate(module.blocks):
        past = state[i][-M:]
        a = attend(block, h, torch.stack([*past, h]), M)
        if block.gates is None:
            u = h + a
            out = u + block.ff(block.norm_ff(u))
        else:
            u = block.gates[0](h, torch.relu(a))
            out = block.gates[1](u, torch.relu(block.ff(block.norm_ff(u))))
        new.append([*past, h][-M:])
        h = out
    return module.norm(h), new


def trxl_state_out(module, lists):
    """The lists of past inputs -> (window [L, M, d] zero-padded at the front, valid [M])."""
    M, d = module.window, module.hidden_size
    k = len(lists[0])
    pad = torch.zeros(M - k, d, dtype=torch.float64)
    window = torch.stack([torch.cat([pad, *[p.unsqueeze(0) for p in past]]) for past in lists])
    return [window, torch.arange(M) >= M - k]


def reference(module, x, states, is_init):
    """x [T, N, F], states [N, ...], is_init [T, N]: each column's episodes alone, from zeros (or
    the stored state for a column's first segment when it does not start with a reset)."""
    trxl = isinstance(module, TrXLModule)
    step = trxl_step if trxl else mingru_step if isinstance(module, MinGRUModule) else ffm_step
    Tn, N = is_init.shape
    ys, nxts = [], []
    for n in range(N):
        for t in range(Tn):
            if t == 0 or is_init[t, n]:
                s = [torch.zeros_like(st[n]) if is_init[t, n] else st[n] for st in states]
                if trxl:  # the valid suffix of the stored window, as lists
                    k = int(s[1].sum())
                    s = [[w[module.window - k + j] for j in range(k)] for w in s[0]]
            y, s = step(module, x[t, n], s)
            ys.append(y)
            nxts.append(trxl_state_out(module, s) if trxl else s)
    y = torch.stack(ys).view(N, Tn, -1).transpose(0, 1)
    nxt = [
        torch.stack([o[k] for o in nxts]).view(N, Tn, *nxts[0][k].shape).transpose(0, 1)
        for k in range(len(nxts[0]))
    ]
    return y, nxt


def grads(module, x, states, y, nxt):
    """Gradients of a fixed random linear function of (y, float next states) w.r.t. the
    parameters, x and the float states."""
    g = torch.Generator().manual_seed(7)
    loss = (torch.randn(y.shape, generator=g, dtype=y.dtype) * y).sum()
    for s in nxt:
        if s.is_floating_point():
            loss = loss + (torch.randn(s.shape, generator=g, dtype=s.dtype) * s).sum()
    wrt = [*module.parameters(), x, *[s for s in states if s.requires_grad]]
    return torch.autograd.grad(loss, wrt)


def run_mode(module, mode, x, states, is_init, need_states=True):
    with recurrent_mode(mode):
        return module.run(x, states, is_init, time_dim=True, need_states=need_states)


def flat(x, states, is_init):
    N = is_init[0].numel()
    lead = is_init.shape[1:-1]
    return (
        x.reshape(T, N, F),
        [s.reshape(N, *s.shape[len(lead) :]) for s in states],
        is_init.reshape(T, N),
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("seed", [1, 2])
def test_temporal_equals_loop_equals_reference(kind, num_layers, seed):
    """init_pattern: a reset at t=0 only, twice in a row, never, at every step, ~10% at random."""
    module = make(kind, num_layers)
    x, states, is_init = inputs(module, seed)
    y_ref, nxt_ref = reference(module, *flat(x, states, is_init))
    y_ref = y_ref.reshape(T, *LEAD, -1)
    nxt_ref = [r.reshape(T, *LEAD, *r.shape[2:]) for r in nxt_ref]
    g_ref = grads(module, x, states, y_ref, nxt_ref)
    for mode in ("temporal", "sequential"):
        y, nxt = run_mode(module, mode, x, states, is_init)
        torch.testing.assert_close(y, y_ref, **TOL)
        for s, r in zip(nxt, nxt_ref, strict=True):
            torch.testing.assert_close(s, r, **TOL)
        for a, b in zip(grads(module, x, states, y, nxt), g_ref, strict=True):
            torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("kind", KINDS)
def test_loss_path_without_states(kind):
    module = make(kind)
    x, states, is_init = inputs(module, seed=3)
    y_full, _ = run_mode(module, "temporal", x, states, is_init)
    y, nxt = run_mode(module, "temporal", x, states, is_init, need_states=False)
    assert nxt is None
    torch.testing.assert_close(y, y_full, **TOL)


@pytest.mark.parametrize("kind", ["mingru", "ffm", "trxl"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["temporal", "sequential"])
def test_gradients_finite_with_resets_at_start_and_in_a_row(kind, dtype, mode):
    """Resets at t=0 and at consecutive steps, on a long rollout (T=600 temporal; 64 for the
    step loop) and inputs 30x larger than usual: every gradient is finite."""
    t = 600 if mode == "temporal" else 64
    module = make(kind, dtype=dtype)
    x, states, _ = inputs(module, t=t, lead=(4,), dtype=dtype)
    with torch.no_grad():
        x.mul_(30)
    is_init = torch.zeros(t, 4, 1, dtype=torch.bool)
    is_init[0] = True
    is_init[[5, 6, 7, t - 2, t - 1], 1] = True
    y, nxt = run_mode(module, mode, x, states, is_init)
    for g in grads(module, x, states, y, nxt):
        assert torch.isfinite(g).all()
    assert torch.isfinite(y).all()


@pytest.mark.parametrize("kind", ["mingru", "ffm", "trxl"])
def test_single_step_resets_state(kind):
    module = make(kind)
    x, states, _ = inputs(module, lead=(6,))
    init = torch.tensor([True, False, True, False, False, True]).unsqueeze(-1)
    y, _ = module.run(x[0], states, init, time_dim=False)
    zeros = [torch.zeros_like(s) for s in states]
    y0, _ = module.run(x[0], zeros, torch.zeros_like(init), time_dim=False)
    y1, _ = module.run(x[0], states, torch.zeros_like(init), time_dim=False)
    torch.testing.assert_close(y[init[:, 0]], y0[init[:, 0]], **TOL)
    torch.testing.assert_close(y[~init[:, 0]], y1[~init[:, 0]], **TOL)
    assert not torch.allclose(y0[~init[:, 0]], y1[~init[:, 0]])


@pytest.mark.parametrize("kind", ["mingru", "ffm", "trxl"])
def test_tensordict_path_sequential_steps_equal_temporal(kind):
    module = make(kind)
    module.in_keys, module.out_keys = [K.OBSERVATION], ["features"]
    g = torch.Generator().manual_seed(4)
    td = TensorDict({K.IS_INIT: init_pattern(4, T, (5,))}, batch_size=[T, 5])
    td.set(K.OBSERVATION, torch.randn(T, 5, F, generator=g, dtype=torch.float64))
    for k, s in zip(module.state_keys, random_states(module, (T, 5), g), strict=True):
        td.set(k, s.detach())  # beyond t=0 junk: temporal mode reads the first row only
    with torch.no_grad(), recurrent_mode("sequential"):
        carried, outs = {k: td[0].get(k) for k in module.state_keys}, []
        for t in range(T):
            step = td[t].clone()
            step.update(carried)
            step = module(step)
            outs.append(step.get("features"))
            carried = {k: step.get(K.nxt(k)) for k in module.state_keys}
    with torch.no_grad(), recurrent_mode("temporal"):
        full = module(td.clone())
    torch.testing.assert_close(full.get("features"), torch.stack(outs), **TOL)
    for k in module.state_keys:
        torch.testing.assert_close(full.get(K.nxt(k))[-1], carried[k], **TOL)


BAD = [
    ({"memory": {"window": 0}}, "policy.memory.window=0"),
    ({"hidden_size": 10, "memory": {"heads": 4}}, "policy.memory.heads=4"),
    ({"memory": {"heads": 0}}, "policy.memory.heads=0"),
    ({"recurrent_mode": "temporal"}, "policy.recurrent_mode='temporal'"),
    ({"memory": {"gate_bias": float("nan")}}, "policy.memory.gate_bias=nan"),
]


@pytest.mark.parametrize(("kw", "name"), BAD)
def test_bad_trxl_settings_are_one_config_error_line(kw, name):
    with pytest.raises(ConfigError) as err:
        PolicyConfig(kind="trxl", **kw)
    assert name in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="must be >= 1"):
        TrXLModule(F, H, window=0)


@pytest.mark.parametrize("bias", [0.0, 1.0, 2.0])
def test_gate_bias_sets_how_much_of_the_attention_passes_at_first(bias):
    """With its weights at zero the gate is (1 - z) x + z tanh(0), z = sigmoid(-bias): the policy
    config's gate_bias reaches every gate of every block."""
    cfg = PolicyConfig(
        kind="trxl", hidden_size=H, num_layers=2, memory={"heads": 4, "gate_bias": bias}
    )
    trxl = build_memory(cfg, F)
    x = torch.randn(5, H, dtype=torch.float64)
    for block in trxl.blocks:
        for gate in block.gates:
            gate.double()
            for p in gate.parameters():
                torch.nn.init.zeros_(p)
            want = (1 - torch.sigmoid(torch.tensor(-bias, dtype=torch.float64))) * x
            torch.testing.assert_close(gate(x, torch.randn_like(x)), want, rtol=0, atol=1e-15)


def test_state_specs():
    assert make("mingru").state_specs[K.RECURRENT_STATE_H].shape == (2, H)
    assert make("ffm").state_specs["ffm_state"].shape == (2, 2, 3, 2)
    specs = make("trxl").state_specs
    assert specs["trxl_window"].shape == (2, 3, H) and specs["trxl_valid"].dtype == torch.bool


@pytest.mark.parametrize("t", [1, 2, 5, 16, 17, 100, 513])
@pytest.mark.parametrize("complex_", [False, True])
def test_chunked_scan_equals_a_step_loop(t, complex_):
    """Every chunk layout (padded or not, one chunk, one step), real and complex, zeros in a."""
    g = torch.Generator().manual_seed(t)
    a = torch.rand(t, 3, 4, generator=g, dtype=torch.float64)
    a[torch.rand(t, 3, 4, generator=g) < 0.1] = 0.0
    b, x0 = torch.randn(t, 3, 4, generator=g, dtype=torch.float64), torch.randn(3, 4)
    x0 = x0.double()
    if complex_:
        a, b, x0 = torch.polar(a, torch.ones_like(a)), torch.complex(b, -b), torch.complex(x0, x0)
    want, x = [], x0
    for at, bt in zip(a, b, strict=True):
        x = at * x + bt
        want.append(x)
    torch.testing.assert_close(chunked_scan(a, b, x0), torch.stack(want), **TOL)


@pytest.mark.parametrize("complex_", [False, True])
def test_chunked_scan_backward_passes_gradcheck(complex_):
    """Its hand-written backward (the recurrence reversed in time) against finite differences."""
    for t in (1, 2, 7, 17):
        g = torch.Generator().manual_seed(t)
        a = torch.rand(t, 2, 3, generator=g, dtype=torch.float64)
        a[0, 0] = 0.0  # a reset at t=0
        b, x0 = torch.randn(2, t, 2, 3, generator=g, dtype=torch.float64).unbind(0)
        x0 = x0[0]
        if complex_:
            a, b = torch.polar(a, a.flip(0)), torch.complex(b, b.flip(0))
            x0 = torch.complex(x0, -x0)
        args = [v.requires_grad_() for v in (a, b, x0)]
        assert torch.autograd.gradcheck(chunked_scan, args)


@pytest.mark.parametrize("kind", ["mingru", "ffm"])
def test_long_rollout_float32_stays_close_to_float64(kind):
    """T=4096 with ~2% resets: the float32 scan's error does not grow with the length (only
    products of factors <= 1 and sums), checked against the same module in float64."""
    t = 4096
    m64 = make(kind, dtype=torch.float64)
    m32 = make(kind, dtype=torch.float32)
    x, states, _ = inputs(m64, t=t, lead=(4,))
    is_init = torch.rand(t, 4, 1, generator=torch.Generator().manual_seed(0)) < 0.02
    with torch.no_grad():
        y64, _ = run_mode(m64, "temporal", x, states, is_init)
        y32, _ = run_mode(m32, "temporal", x.float(), [s.float() for s in states], is_init)
    err = (y32.double() - y64).abs()
    assert err.max() < 1e-5  # ~3e-7 seen, outputs ~1
