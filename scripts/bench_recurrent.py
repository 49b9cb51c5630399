"""Temporal mode of LSTMModule against the step loop, a bare nn.LSTMCell loop and the lower bound.

    PYTHONPATH=. python scripts/bench_recurrent.py [--reps 30] [--variants] [--cell gru]

hidden 64, input 64, [T=128, B=16], float32, one thread, ~2% and ~10% random resets (is_init).
First checks on the timed data that temporal mode equals the sequential loop (outputs, next states,
parameter gradients), then times, in the same run:
- temporal (loss path): ``run(..., time_dim=True, need_states=False)``;
- temporal + states: the same with per-step next states (the TensorDict path);
- sequential loop: the module's own step loop (``recurrent_mode("sequential")``);
- LSTMCell loop: bare torch, one ``nn.LSTMCell`` step per t with the state masked at resets;
- nn.LSTM (lower bound): one fused call on the whole sequence, ignoring the resets.
With ``--variants``, other ways to run the loss path, each checked against the LSTMCell loop:
- one padded call: segments padded to the longest, one fused call (``call_cost`` huge);
- chunk per length: the lanes' staircase cut at every distinct segment length (``call_cost`` = 0);
- packed sequence: one nn.LSTM call on a PackedSequence (no padding, but no oneDNN kernel);
- union of resets: all columns, one fused call between consecutive time steps holding a reset.
``--memories`` times the other memories instead (see :func:`memories`): minGRU, FFM and TrXL
temporal mode beside the LSTM's and ``nn.LSTM``, T = 128 / 512 / 2048, B = 16, hidden 64 / 256,
2% / 10% resets, and prints their stored state bytes per step.
``--cell gru`` times GRUModule the same way (GRUCell loop, nn.GRU). torch has no oneDNN GRU kernel
on the CPU: its GRU runs the cell's ops step by step, so fwd+bwd costs ~3-4x the LSTM's. The first
row is the loss path on rltool's own kernel (``policy.memory.kernel=rltool``, the default, checked
the same way), the "temporal" row torch's; a second table times a policy's two memories (actor and
critic) on whole sequences: two LSTMs, two GRUs joined in one loop of rltool's kernel, apart, and
two ``torch.gru`` calls.
"forward" runs under no_grad; "fwd+bwd" is a forward with grad and the backward of a sum.
Reported: median ms per call, and the ratio to the lower bound of the same column.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from rltool.modules.ffm import FFMModule
from rltool.modules.gru_kernel import gru_sequences
from rltool.modules.mingru import MinGRUModule
from rltool.modules.recurrent import GRUModule, LSTMModule, _Lanes, recurrent_mode
from rltool.modules.trxl import TrXLModule

T, B, F, H = 128, 16, 64, 64


def make_data(rate: float, n_states: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, B, F, generator=g)
    states = tuple(torch.randn(B, 1, H, generator=g) * 0.5 for _ in range(n_states))
    is_init = torch.rand(T, B, 1, generator=g) < rate
    return x, states, is_init


def check(module: LSTMModule, x, states, is_init):
    """Temporal mode == the sequential loop on this data: outputs, next states, gradients."""
    params = list(module.parameters())
    res = {}
    for mode in ("sequential", "temporal"):
        with recurrent_mode(mode):
            y, nxt = module.run(x, states, is_init, time_dim=True)
        loss = y.sum() + sum(s.square().sum() for s in nxt)
        res[mode] = [y, *nxt, *torch.autograd.grad(loss, params)]
    # relative to each tensor's scale: float32 sums of 2048 terms in the gradients
    err = max(
        ((a - b).abs().max() / b.abs().max()).item() for a, b in zip(*res.values(), strict=True)
    )
    assert err < 1e-5, f"temporal mode differs from the sequential loop by {err:.2e} (relative)"
    return err


def cell_loop(cell: nn.RNNCellBase, x, states, is_init):
    """states: (h, c) of an LSTMCell, (h,) of a GRUCell, each [B, H]."""
    keep = (~is_init).to(x.dtype)  # [T, B, 1]
    ys = []
    for t in range(x.shape[0]):
        masked = tuple(s * keep[t] for s in states)
        out = cell(x[t], masked if len(masked) == 2 else masked[0])
        states = out if isinstance(out, tuple) else (out,)
        ys.append(states[0])
    return torch.stack(ys)


def variants(module: LSTMModule | GRUModule, x, states, is_init):
    rnn = module.layers[0]
    cell = (nn.LSTMCell if isinstance(rnn, nn.LSTM) else nn.GRUCell)(F, H)
    cell.load_state_dict({k.removesuffix("_l0"): v for k, v in rnn.state_dict().items()})
    first = tuple(s[:, 0] for s in states)
    whole = tuple(s.unsqueeze(0) for s in first)
    whole = whole if len(whole) == 2 else whole[0]
    name = type(rnn).__name__

    def temporal(need_states):
        def f():
            # a new is_init tensor each call: its lanes are built every time, as for a fresh
            # rollout (PPO's later epochs over one rollout reuse them)
            with recurrent_mode("temporal"):
                fresh = is_init.clone()
                return module.run(x, states, fresh, time_dim=True, need_states=need_states)[0]

        return f

    def sequential():
        with recurrent_mode("sequential"):
            return module.run(x, states, is_init, time_dim=True)[0]

    return {
        "temporal (loss path)": temporal(False),
        "temporal + states": temporal(True),
        "sequential loop": sequential,
        f"{name}Cell loop": lambda: cell_loop(cell, x, first, is_init),
        f"nn.{name} (lower bound)": lambda: rnn(x, whole)[0],
    }


def with_setting(module, name: str, value, x, states, is_init):
    """The temporal loss path with ``module.<name>`` set to ``value`` for the call (a new
    is_init each call: lanes built every time)."""

    def f():
        saved = getattr(module, name)
        setattr(module, name, value)
        try:
            with recurrent_mode("temporal"):
                return module.run(x, states, is_init.clone(), time_dim=True, need_states=False)[0]
        finally:
            setattr(module, name, saved)

    return f


def gru_kernels(reps: int) -> None:
    """A policy's actor and critic memories over one sequence (no resets), forward + backward:
    two LSTMs (oneDNN), two GRUs joined in one loop of rltool's kernel (the default), the same
    two apart, and two torch.gru calls; ms and the ratio to the two LSTMs."""
    print(
        "\n| [T, N], hidden 64, 2 memories, fwd+bwd | 2 LSTMs (oneDNN) | 2 GRUs joined (rltool) "
        "| 2 GRUs apart (rltool) | 2 x torch.gru |\n|---|---|---|---|---|"
    )
    for steps, n in [(128, 2), (32, 8), (128, 16)]:
        torch.manual_seed(0)
        grus, lstms = [nn.GRU(H, H) for _ in range(2)], [nn.LSTM(H, H) for _ in range(2)]
        gw = [(g.weight_ih_l0, g.weight_hh_l0, g.bias_ih_l0, g.bias_hh_l0) for g in grus]
        lw = [(m.weight_ih_l0, m.weight_hh_l0, m.bias_ih_l0, m.bias_hh_l0) for m in lstms]
        x, h0 = torch.randn(steps, n, H, requires_grad=True), torch.zeros(1, n, H)
        fns = _pair_fns(x, h0, gw, lw)
        ms = timeit(fns, True, reps)
        cells = " | ".join(
            f"{ms[k]:.2f} ms ({ms[k] / ms['lstm']:.1f}x)" for k in ("joined", "apart", "torch")
        )
        print(f"| [{steps}, {n}] | {ms['lstm']:.2f} ms | {cells} |")


def _pair_fns(x, h0, gw, lw) -> dict:
    flags = (True, 1, 0.0, True, False, False)
    return {
        "lstm": lambda: sum(torch.lstm(x, (h0, h0), w, *flags)[0] for w in lw),
        "joined": lambda: sum(y for y, _ in gru_sequences([x, x], [h0, h0], gw)),
        "apart": lambda: sum(gru_sequences([x], [h0], [w])[0][0] for w in gw),
        "torch": lambda: sum(torch.gru(x, h0, w, *flags)[0] for w in gw),
    }


def packed(lstm: nn.LSTM, x, states, is_init):
    """The call_cost=0 staircase has no padding rows: it is the packed-sequence layout."""
    lanes = _Lanes(is_init[..., 0], 0.0)
    sizes = torch.repeat_interleave(torch.tensor(lanes.counts), torch.tensor(lanes.steps))
    keep = ~is_init[0]
    h0, c0 = (lanes.initial(s[:, 0] * keep) for s in states)

    def f():
        data = x.reshape(T * B, F).index_select(0, lanes.src)
        y, _ = lstm(PackedSequence(data, sizes), (h0, c0))
        return y.data.index_select(0, lanes.dst).view(T, B, H)

    return f


def union_of_resets(lstm: nn.LSTM, x, states, is_init):
    keep = (~is_init).to(x.dtype)  # [T, B, 1]
    times = [0, *(is_init[1:, :, 0].any(1).nonzero()[:, 0] + 1).tolist(), T]

    def f():
        h, c = (s[:, 0].unsqueeze(0) for s in states)
        ys = []
        for a, b in zip(times[:-1], times[1:], strict=True):
            y, (h, c) = lstm(x[a:b], (h * keep[a], c * keep[a]))
            ys.append(y)
        return torch.cat(ys)

    return f


def extra_variants(module: LSTMModule, x, states, is_init, reference):
    """The other strategies, each checked against ``reference`` (the LSTMCell loop)."""
    lstm = module.layers[0]
    fns = {
        "  one padded call": with_setting(module, "call_cost", 1e12, x, states, is_init),
        "  chunk per length": with_setting(module, "call_cost", 0.0, x, states, is_init),
        "  packed sequence": packed(lstm, x, states, is_init),
        "  union of resets": union_of_resets(lstm, x, states, is_init),
    }
    with torch.no_grad():
        ref = reference()
        for name, fn in fns.items():
            err = ((fn() - ref).abs().max() / ref.abs().max()).item()
            assert err < 1e-5, f"{name.strip()} differs from the LSTMCell loop by {err:.1e}"
    return fns


def timeit(fns: dict, backward: bool, reps: int, warmup: int = 3) -> dict[str, float]:
    """Median ms per call of each fn; the variants take turns, so load swings hit them alike."""

    def once(fn):
        t0 = time.perf_counter()
        if backward:
            fn().sum().backward()
        else:
            with torch.no_grad():
                fn()
        return time.perf_counter() - t0

    times = {name: [] for name in fns}
    for i in range(reps + warmup):
        for name, fn in fns.items():
            t = once(fn)
            if i >= warmup:
                times[name].append(t)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--variants", action="store_true", help="also time other temporal strategies")
    p.add_argument("--cell", choices=["lstm", "gru"], default="lstm")
    p.add_argument("--memories", action="store_true", help="time minGRU / FFM / TrXL instead")
    args = p.parse_args()
    if args.memories:
        torch.set_num_threads(1)
        return memories(min(args.reps, 5))
    if args.variants and args.cell != "lstm":
        p.error("--variants times LSTM strategies only: drop --cell gru")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    module = (LSTMModule if args.cell == "lstm" else GRUModule)(F, H, 1)
    kind = type(module.layers[0]).__name__
    rows, cols = {}, []
    for rate in (0.02, 0.10):
        x, states, is_init = make_data(rate, len(module.state_keys))
        err = check(module, x, states, is_init)
        n_seg = int(is_init[1:].sum()) + B
        print(
            f"resets {rate:.0%}: {int(is_init.sum())} is_init, {n_seg} segments; "
            f"temporal == sequential loop (max rel. diff {err:.1e})"
        )
        fns = variants(module, x, states, is_init)
        if args.cell == "gru":
            module.kernel = "rltool"
            check(module, x, states, is_init)
            module.kernel = "torch"
            fns = {
                "temporal, kernel=rltool": with_setting(
                    module, "kernel", "rltool", x, states, is_init
                ),
                **fns,
            }
        if args.variants:
            fns.update(extra_variants(module, x, states, is_init, fns[f"{kind}Cell loop"]))
        for backward in (False, True):
            col = f"{rate:.0%} {'fwd+bwd' if backward else 'forward'}"
            cols.append(col)
            for name, ms in timeit(fns, backward, args.reps).items():
                rows.setdefault(name, {})[col] = ms
    lower = rows[f"nn.{kind} (lower bound)"]
    width = max(map(len, rows)) + 2
    print(f"\n{'ms per call (x lower bound)':<{width}}" + "".join(f"{c:>18}" for c in cols))
    for name, r in rows.items():
        cells = "".join(f"{f'{r[c]:.2f} ({r[c] / lower[c]:.1f}x)':>18}" for c in cols)
        print(f"{name:<{width}}{cells}")
    if args.cell == "gru":
        gru_kernels(args.reps)
    print(f"\ntorch {torch.__version__}, threads {torch.get_num_threads()}, median of {args.reps}")


def memory_zoo(H: int) -> dict[str, nn.Module]:
    """The memories at output width H on inputs of width H; minGRU and FFM sized to the LSTM's
    parameter count (4 minGRU layers: exactly; FFM m = H/2, c = 4: 0.87x)."""
    torch.manual_seed(0)
    return {
        "LSTM temporal": LSTMModule(H, H, 1),
        "minGRU x4": MinGRUModule(H, H, 4),
        "FFM m=H/2 c=4": FFMModule(H, H, 1, trace_size=H // 2, context_size=4),
        "TrXL M=16": TrXLModule(H, H, 1, window=16, heads=4),
    }


def state_bytes(module: nn.Module) -> int:
    """Bytes of one env's state (the collector stores it before and after each step: x2)."""
    return sum(s.dtype.itemsize * torch.Size(s.shape).numel() for s in module.state_specs.values())


def memory_fns(zoo: dict, x, is_init) -> dict:
    """Each memory's temporal loss path (a fresh is_init per call, as for a new rollout) and
    the one fused ``nn.LSTM`` call that ignores the resets."""

    def temporal(m, states):
        def f():
            with recurrent_mode("temporal"):
                return m.run(x, states, is_init.clone(), time_dim=True, need_states=False)[0]

        return f

    fns = {
        n: temporal(m, [s.zeros(x.shape[1]) for s in m.state_specs.values()])
        for n, m in zoo.items()
    }
    lstm = zoo["LSTM temporal"].layers[0]
    fns["nn.LSTM (lower bound)"] = lambda: lstm(x)[0]
    return fns


def check_memories(zoo: dict, x, is_init) -> float:
    """Temporal == sequential loop (outputs) for every memory on this data; max rel. diff."""
    err = 0.0
    with torch.no_grad():
        for m in zoo.values():
            states = [s.zeros(x.shape[1]) for s in m.state_specs.values()]
            ys = []
            for mode in ("sequential", "temporal"):
                with recurrent_mode(mode):
                    ys.append(m.run(x, states, is_init, time_dim=True, need_states=False)[0])
            err = max(err, ((ys[0] - ys[1]).abs().max() / ys[0].abs().max()).item())
    assert err < 1e-5, f"temporal mode differs from the sequential loop by {err:.2e}"
    return err


def memories(reps: int) -> None:
    print(
        "| H | T | resets | pass | "
        + " | ".join(memory_zoo(8))
        + " | nn.LSTM | LSTM / minGRU | LSTM / FFM |"
    )
    print("|---" * 11 + "|")
    for H in (64, 256):
        zoo = memory_zoo(H)
        for T in (128, 512, 2048):
            for rate in (0.02, 0.10):
                g = torch.Generator().manual_seed(0)
                x = torch.randn(T, B, H, generator=g)
                is_init = torch.rand(T, B, 1, generator=g) < rate
                if T == 128:
                    check_memories(zoo, x, is_init)
                fns = memory_fns(zoo, x, is_init)
                for backward in (False, True):
                    ms = list(timeit(fns, backward, reps, warmup=1).values())
                    cells = " | ".join(f"{v:.1f}" for v in ms)
                    ratio = f"{ms[0] / ms[1]:.2f}x | {ms[0] / ms[2]:.2f}x"
                    pas = "fwd+bwd" if backward else "forward"
                    print(f"| {H} | {T} | {rate:.0%} | {pas} | {cells} | {ratio} |", flush=True)
        params = {n: sum(p.numel() for p in m.parameters()) for n, m in zoo.items()}
        stored = {n: state_bytes(m) for n, m in zoo.items()}
        print(f"hidden {H}: parameters {params}; state bytes per env {stored}")
    print(
        f"ms per call, median of {reps}; torch {torch.__version__}, 1 thread, B={B}; "
        "temporal == sequential checked at T=128"
    )


if __name__ == "__main__":
    main()
