"""LSTMModule / GRUModule: temporal mode == sequential step loop == an independent per-episode
reference built from raw torch.nn.LSTMCell / GRUCell sharing the weights (float64, to 1e-8)."""

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rltool import keys as K
from rltool.modules.memory import run_group
from rltool.modules.recurrent import GRUModule, LSTMModule, _chunk_bounds, recurrent_mode

T, LEAD, F, H = 12, (2, 4), 3, 5
TOL = dict(rtol=0, atol=1e-8)


class TorchGRU(GRUModule):
    """GRUModule on torch's GRU (``policy.memory.kernel=torch``; the default is rltool's own
    CPU kernel): every test below holds both to the same per-episode GRUCell reference."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, kernel="torch", **kwargs)


MODULES = [LSTMModule, GRUModule, TorchGRU]


def init_pattern(seed: int, t: int = T, lead=LEAD) -> torch.Tensor:
    """[T, *lead, 1] bool: column 0 resets at t=0 only, 1 resets twice in a row (and at the last
    step), 2 never resets, 3 resets at every step, the rest ~10% at random."""
    g = torch.Generator().manual_seed(seed)
    init = (torch.rand(t, *lead, generator=g) < 0.1).reshape(t, -1)
    init[:, :4] = False
    init[0, 0] = True
    init[[3, 4, t - 1], 1] = True
    init[:, 3] = True
    return init.reshape(t, *lead, 1)


def make(cls, num_layers, seed=0, **kw):
    torch.manual_seed(seed)
    return cls(F, H, num_layers, **kw).double()


def inputs(module, seed=1, t=T, lead=LEAD):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(t, *lead, F, generator=g, dtype=torch.float64, requires_grad=True)
    states = tuple(
        torch.randn(*lead, module.num_layers, H, generator=g, dtype=torch.float64).requires_grad_()
        for _ in module.state_keys
    )
    return x, states, init_pattern(seed, t, lead)


def ref_cells(module):
    """One raw cell per layer, holding the module's own Parameters (so gradients are comparable)."""
    cells = []
    for layer in module.layers:
        cell_cls = nn.LSTMCell if isinstance(module, LSTMModule) else nn.GRUCell
        cell = cell_cls(layer.input_size, H).double()
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            setattr(cell, name, getattr(layer, name + "_l0"))
        cells.append(cell)
    return cells


def reference(module, x, states, is_init):
    """Each episode alone, batch 1, from zeros (or the stored state for a column's first segment
    when it does not start with a reset). x [T, N, F], states [N, L, H] each, is_init [T, N]."""
    cells, lstm = ref_cells(module), isinstance(module, LSTMModule)
    L, (Tn, N) = module.num_layers, is_init.shape
    ys, nxts = {}, {}
    for n in range(N):
        for t in range(Tn):
            if t == 0 or is_init[t, n]:
                zero = torch.zeros(L, 1, H, dtype=x.dtype)
                s = [zero] * len(states) if is_init[t, n] else [st[n].unsqueeze(1) for st in states]
            h_in, new = x[t, n].unsqueeze(0), []
            for i, cell in enumerate(cells):
                out = cell(h_in, (s[0][i], s[1][i])) if lstm else (cell(h_in, s[0][i]),)
                new.append(out)
                h_in = out[0]
            s = [torch.stack([o[k] for o in new]) for k in range(len(states))]
            ys[t, n], nxts[t, n] = h_in[0], [st[:, 0] for st in s]
    y = torch.stack([torch.stack([ys[t, n] for n in range(N)]) for t in range(Tn)])
    nxt = tuple(
        torch.stack([torch.stack([nxts[t, n][k] for n in range(N)]) for t in range(Tn)])
        for k in range(len(states))
    )
    return y, nxt


def grads(module, x, states, y, nxt):
    """Gradients of a fixed random linear function of (y, next states) w.r.t. params and inputs."""
    g = torch.Generator().manual_seed(7)
    loss = (torch.randn(y.shape, generator=g, dtype=y.dtype) * y).sum()
    for s in nxt:
        loss = loss + (torch.randn(s.shape, generator=g, dtype=s.dtype) * s).sum()
    return torch.autograd.grad(loss, [*module.parameters(), x, *states])


def run_mode(module, mode, x, states, is_init, need_states=True):
    with recurrent_mode(mode):
        return module.run(x, states, is_init, time_dim=True, need_states=need_states)


@pytest.mark.parametrize("cls", MODULES)
@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("seed", [1, 2])
def test_temporal_equals_loop_equals_reference(cls, num_layers, seed):
    module = make(cls, num_layers)
    x, states, is_init = inputs(module, seed)
    N = is_init[0].numel()
    flat = (
        x.reshape(T, N, F),
        tuple(s.reshape(N, num_layers, H) for s in states),
        is_init.reshape(T, N),
    )
    y_ref, nxt_ref = reference(module, *flat)
    y_ref = y_ref.reshape(T, *LEAD, H)
    nxt_ref = [s.reshape(T, *LEAD, num_layers, H) for s in nxt_ref]
    g_ref = grads(module, x, states, y_ref, nxt_ref)
    # call_cost 0: a chunk at every distinct segment length; 1e9: one padded chunk
    for mode, call_cost in [("temporal", 0.0), ("temporal", 1e9), ("sequential", 0.0)]:
        module.call_cost = call_cost
        y, nxt = run_mode(module, mode, x, states, is_init)
        assert y.shape == (T, *LEAD, H) and len(nxt) == len(module.state_keys)
        torch.testing.assert_close(y, y_ref, **TOL)
        for s, r in zip(nxt, nxt_ref, strict=True):
            torch.testing.assert_close(s, r, **TOL)
        for a, b in zip(grads(module, x, states, y, nxt), g_ref, strict=True):
            torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("cls", MODULES)
@pytest.mark.parametrize("pattern", ["none", "all", "first_only"])
def test_temporal_edge_patterns(cls, pattern):
    """No reset anywhere, a reset at every step, a reset only at t=0 (no segment split)."""
    module = make(cls, 2)
    x, states, _ = inputs(module)
    is_init = torch.zeros(T, *LEAD, 1, dtype=torch.bool)
    if pattern == "all":
        is_init[:] = True
    elif pattern == "first_only":
        is_init[0] = True
    seq = run_mode(module, "sequential", x, states, is_init)
    tmp = run_mode(module, "temporal", x, states, is_init)
    for a, b in zip([seq[0], *seq[1]], [tmp[0], *tmp[1]], strict=True):
        torch.testing.assert_close(a, b, **TOL)
    for a, b in zip(grads(module, x, states, *seq), grads(module, x, states, *tmp), strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("cls", MODULES)
def test_lanes_reused_only_while_is_init_is_unchanged(cls):
    """PPO's epochs re-run one rollout: its lanes are built once, and built anew when the same
    tensor is written in place (the collector's buffer), so the outputs always match the loop."""
    module = make(cls, 1)
    x, states, is_init = inputs(module, seed=4)
    run_mode(module, "temporal", x, states, is_init)
    lanes = module._lanes_cache[2]
    run_mode(module, "temporal", x, states, is_init)
    assert module._lanes_cache[2] is lanes
    is_init[5:7] = ~is_init[5:7]  # a new pattern in the same memory
    y, nxt = run_mode(module, "temporal", x, states, is_init)
    assert module._lanes_cache[2] is not lanes
    y_seq, nxt_seq = run_mode(module, "sequential", x, states, is_init)
    for a, b in zip([y, *nxt], [y_seq, *nxt_seq], strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("cls", MODULES)
def test_loss_path_without_states(cls):
    """``need_states=False`` (the loss path) gives the same outputs and parameter gradients."""
    module = make(cls, 2)
    x, states, is_init = inputs(module, seed=3)
    y_full, _ = run_mode(module, "temporal", x, states, is_init, need_states=True)
    y, nxt = run_mode(module, "temporal", x, states, is_init, need_states=False)
    assert nxt is None
    torch.testing.assert_close(y, y_full, **TOL)
    g = torch.randn(y.shape, dtype=y.dtype, generator=torch.Generator().manual_seed(0))
    params = list(module.parameters())
    g_part = torch.autograd.grad((g * y).sum(), params)
    g_full = torch.autograd.grad((g * y_full).sum(), params)
    for a, b in zip(g_part, g_full, strict=True):
        torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("cls", MODULES)
def test_single_step_resets_state(cls):
    """A step with is_init True ignores the given state; without it the state is used."""
    module = make(cls, 2)
    x, states, _ = inputs(module, lead=(6,))
    init = torch.tensor([True, False, True, False, False, True]).unsqueeze(-1)
    y, nxt = module.run(x[0], states, init, time_dim=False)
    y0, _ = module.run(x[0], tuple(torch.zeros_like(s) for s in states), init, time_dim=False)
    y1, _ = module.run(x[0], states, torch.zeros_like(init), time_dim=False)
    torch.testing.assert_close(y[init[:, 0]], y0[init[:, 0]], **TOL)
    torch.testing.assert_close(y[~init[:, 0]], y1[~init[:, 0]], **TOL)
    assert not torch.allclose(y0[~init[:, 0]], y1[~init[:, 0]])


# ---- TensorDict path ----
def td_inputs(module, obs_key, extra_key, seed=4):
    g = torch.Generator().manual_seed(seed)
    B = 5
    obs = torch.randn(T, B, F - 1, generator=g, dtype=torch.float64)
    extra = torch.randn(T, B, 1, generator=g, dtype=torch.float64)
    is_init = init_pattern(seed, T, (B,))
    # the stored states beyond t=0 are junk: temporal mode must read only the first row
    states = {
        k: torch.randn(T, B, module.num_layers, H, generator=g, dtype=torch.float64)
        for k in module.state_keys
    }
    td = TensorDict({K.IS_INIT: is_init}, batch_size=[T, B])
    td.set(obs_key, obs)
    td.set(extra_key, extra)
    for k, v in states.items():
        td.set(k, v)
    return td


@pytest.mark.parametrize("cls", MODULES)
@pytest.mark.parametrize("nested", [False, True])
def test_tensordict_sequential_steps_equal_temporal(cls, nested):
    obs_key = ("agent", "observation") if nested else K.OBSERVATION
    extra_key = ("agent", "extra") if nested else "extra"
    out_key = ("agent", "features") if nested else "features"
    state_keys = [("agent", k) for k in cls.default_state_keys] if nested else None
    module = make(cls, 2, in_keys=[obs_key, extra_key], out_keys=[out_key], state_keys=state_keys)
    td = td_inputs(module, obs_key, extra_key)
    with recurrent_mode("sequential"):
        carried = {k: td[0].get(k) for k in module.state_keys}
        outs, nxts = [], []
        for t in range(T):
            step = td[t].clone()
            for k, v in carried.items():
                step.set(k, v)
            step = module(step)
            outs.append(step.get(out_key))
            carried = {k: step.get(K.nxt(k)) for k in module.state_keys}  # ("next", k) -> root
            nxts.append(carried)
    with recurrent_mode("temporal"):
        full = module(td.clone())
    torch.testing.assert_close(full.get(out_key), torch.stack(outs), **TOL)
    for k in module.state_keys:
        torch.testing.assert_close(full.get(K.nxt(k)), torch.stack([n[k] for n in nxts]), **TOL)
    # and the tensor-level reference on the concatenated inputs
    x = torch.cat([td.get(obs_key), td.get(extra_key)], -1)
    states = tuple(td.get(k)[0] for k in module.state_keys)
    y_ref, _ = reference(module, x, states, td.get(K.IS_INIT)[..., 0])
    torch.testing.assert_close(full.get(out_key), y_ref, **TOL)


@pytest.mark.parametrize("cls", MODULES)
@pytest.mark.parametrize("mode", ["sequential", "temporal"])
def test_missing_state_key_raises(cls, mode):
    module = make(cls, 1, in_keys=["observation", "extra"])
    td = td_inputs(module, "observation", "extra")
    del td[module.state_keys[-1]]
    step = td if mode == "temporal" else td[0]
    with recurrent_mode(mode), pytest.raises(KeyError, match="missing"):
        module(step)


def test_mode_resolution():
    module = LSTMModule(F, H, default_mode="temporal")
    assert module.mode == "temporal"
    with recurrent_mode("sequential"):
        assert module.mode == "sequential"  # the context beats the module default
        with recurrent_mode("temporal"):
            assert module.mode == "temporal"
        assert module.mode == "sequential"
    assert module.mode == "temporal"
    assert LSTMModule(F, H).mode == "sequential"
    forced = GRUModule(F, H, default_mode="temporal", force_sequential=True)
    with recurrent_mode("temporal"):
        assert forced.mode == "sequential"  # forced beats everything
    with pytest.raises(ValueError, match="unknown recurrent mode"), recurrent_mode("batched"):
        pass
    with pytest.raises(ValueError, match="unknown recurrent mode"):
        LSTMModule(F, H, default_mode="batched")


def test_state_specs():
    lstm, gru = LSTMModule(F, H, 2), GRUModule(F, H, 3, state_keys=["mem"])
    assert set(lstm.state_specs) == {K.RECURRENT_STATE_H, K.RECURRENT_STATE_C}
    assert lstm.state_specs[K.RECURRENT_STATE_C].shape == (2, H)
    assert list(gru.state_specs) == ["mem"] and gru.state_specs["mem"].shape == (3, H)


def chunk_cost(bounds, counts, call_cost):
    return sum(
        (b - a) * n + call_cost for a, b, n in zip(bounds[:-1], bounds[1:], counts, strict=True)
    )


def test_chunk_bounds_are_optimal():
    """The O(m) hull gives the cost of the plain O(m^2) dynamic programme, and valid chunks."""
    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        n = int(torch.randint(1, 40, (1,), generator=g))
        top = int(torch.randint(1, 60, (1,), generator=g))
        length = sorted(torch.randint(1, top + 1, (n,), generator=g).tolist(), reverse=True)
        call_cost = [0.0, 1.0, 7.0, 128.0, 1e9][trial % 5]
        bounds, counts = _chunk_bounds(length, call_cost)
        assert bounds[0] == 0 and bounds[-1] == length[0] and bounds == sorted(set(bounds))
        assert counts == [sum(ln > a for ln in length) for a in bounds[:-1]]
        pts = [0, *sorted(set(length))]
        alive = [sum(ln > a for ln in length) for a in pts]
        best = [0.0]
        for j in range(1, len(pts)):
            best.append(min(best[i] + (pts[j] - pts[i]) * alive[i] for i in range(j)) + call_cost)
        assert chunk_cost(bounds, counts, call_cost) == pytest.approx(best[-1])


@pytest.mark.parametrize("num_layers", [1, 2])
@pytest.mark.parametrize("call_cost", [0.0, 1e9])
def test_grus_in_one_loop_equal_each_alone(num_layers, call_cost):
    """run_group of two GRUs on rltool's kernel (a policy's actor and critic) == each one's own run:
    outputs, per-step states and gradients; GRUs on torch's kernel, or of another width, do not
    join (they run alone)."""
    a, c = make(GRUModule, num_layers, seed=0), make(GRUModule, num_layers, seed=3)
    assert a.joins([a, c]) and not a.joins([a, make(TorchGRU, num_layers)])
    assert not make(TorchGRU, num_layers).joins([make(TorchGRU, num_layers)] * 2)
    a.call_cost = c.call_cost = call_cost
    (xa, sa, is_init), (xc, sc, _) = inputs(a, seed=1), inputs(c, seed=1)
    with recurrent_mode("temporal"):
        alone = [m.run(x, s, is_init, True) for m, x, s in [(a, xa, sa), (c, xc, sc)]]
        joined = run_group([a, c], [xa, xc], [sa, sc], is_init)
    wrt = (xa, *sa, xc, *sc, *a.parameters(), *c.parameters())
    flat = lambda runs: [t for y, nxt in runs for t in (y, *nxt)]
    loss = lambda ts: sum((t * (i + 1)).sum() for i, t in enumerate(ts))
    for got, want in zip(flat(joined), flat(alone), strict=True):
        torch.testing.assert_close(got, want, **TOL)
    g_joined = torch.autograd.grad(loss(flat(joined)), wrt)
    for got, want in zip(g_joined, torch.autograd.grad(loss(flat(alone)), wrt), strict=True):
        torch.testing.assert_close(got, want, **TOL)
