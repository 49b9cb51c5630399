"""Replay on disk: a memmap buffer of 1M transitions of a recurrent policy (LSTM, 256 units: h and
c stored at every step) is filled and sampled while the process's anonymous resident memory
(RssAnon, not page cache) stays small; compared with the same buffer in RAM.

    PYTHONPATH=. python scripts/bench_replay.py [--transitions 1000000] [--dir /tmp]

Prints: the RssAnon of this process at each phase, the memmap size on disk, the in-RAM
alternative's size (computed from the bytes per transition, and measured on a smaller in-RAM
buffer then scaled), and sampling throughput in sequences/s for memmap and in-RAM buffers.
The memmap folder is deleted at the end.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

import torch
from tensordict import TensorDict

from rltool import keys as K
from rltool.data import ReplayBuffer
from rltool.data.buffer import BASE_KEYS

OBS, HIDDEN, LAYERS = 8, 256, 1
STATE_KEYS = (K.RECURRENT_STATE_H, K.RECURRENT_STATE_C)


def rss_anon_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status (Linux only)")


def rollout(T: int, B: int, g: torch.Generator) -> TensorDict:
    """A synthetic [T, B] LSTM rollout with ~1% episode ends."""
    done = torch.rand(T, B, 1, generator=g) < 0.01
    return TensorDict(
        {
            K.OBSERVATION: torch.randn(T, B, OBS, generator=g),
            K.IS_INIT: torch.cat([torch.zeros(1, B, 1, dtype=torch.bool), done[:-1]]),
            K.ACTION: torch.randint(4, (T, B), generator=g),
            K.RECURRENT_STATE_H: torch.randn(T, B, LAYERS, HIDDEN, generator=g),
            K.RECURRENT_STATE_C: torch.randn(T, B, LAYERS, HIDDEN, generator=g),
            K.NEXT: {
                K.OBSERVATION: torch.randn(T, B, OBS, generator=g),
                K.REWARD: torch.randn(T, B, 1, generator=g),
                K.TERMINATED: done,
                K.TRUNCATED: torch.zeros(T, B, 1, dtype=torch.bool),
                K.DONE: done,
            },
        },
        [T, B],
    )


def bytes_per_step(td: TensorDict) -> int:
    leaves = td.select(*BASE_KEYS, *STATE_KEYS)[0, 0]
    return sum(x.numel() * x.element_size() for x in leaves.values(True, True))


def make(n: int, B: int, storage: str, path, args) -> ReplayBuffer:
    return ReplayBuffer(
        n,
        B,
        args.seq_len,
        args.batch,
        keys=(*BASE_KEYS, *STATE_KEYS),
        state_keys=STATE_KEYS,
        burn_in=args.burn_in,
        prioritized=args.prioritized,
        storage=storage,
        path=path,
    )


def fill(buf: ReplayBuffer, n: int, chunks: list[TensorDict]) -> float:
    t0, written, i = time.perf_counter(), 0, 0
    while written < n:
        buf.extend(chunks[i % len(chunks)])
        written += chunks[0].numel()
        i += 1
    return time.perf_counter() - t0


def throughput(buf: ReplayBuffer, seconds: float) -> float:
    buf.sample()  # warm
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        n += buf.sample().shape[1]
    return n / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, default=1_000_000)
    p.add_argument("--ram-transitions", type=int, default=50_000, help="in-RAM reference size")
    p.add_argument("--envs", type=int, default=16)
    p.add_argument("--T", type=int, default=128, help="steps per extend")
    p.add_argument("--seq-len", type=int, default=80)
    p.add_argument("--burn-in", type=int, default=40)
    p.add_argument("--batch", type=int, default=64, help="sequences per sample")
    p.add_argument("--prioritized", action="store_true")
    p.add_argument("--seconds", type=float, default=5.0, help="per throughput measurement")
    p.add_argument("--dir", default="/tmp", help="where the memmap folder goes (deleted after)")
    args = p.parse_args()
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    chunks = [rollout(args.T, args.envs, g) for _ in range(2)]  # reused: RSS stays flat
    per_step = bytes_per_step(chunks[0])
    rows = [("start (torch imported, 2 rollouts made)", rss_anon_mb())]

    folder = Path(tempfile.mkdtemp(prefix="rltool-bench-replay-", dir=args.dir))
    try:
        mm = make(args.transitions, args.envs, "memmap", folder / "storage", args)
        fill_s = fill(mm, args.transitions, chunks)
        rows.append((f"memmap: filled {len(mm):,} transitions", rss_anon_mb()))
        mm_rate = throughput(mm, args.seconds)
        rows.append(("memmap: after sampling", rss_anon_mb()))
        disk = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        mm.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    before = rss_anon_mb()
    ram = make(args.ram_transitions, args.envs, "memory", None, args)
    fill(ram, args.ram_transitions, chunks)
    ram_rate = throughput(ram, args.seconds)
    measured = (rss_anon_mb() - before) * args.transitions / len(ram)
    computed = per_step * args.transitions / 2**20

    peak = max(r[1] for r in rows)
    print(
        f"\nreplay: {args.transitions:,} transitions, LSTM {HIDDEN} units (h, c at every step), "
        f"obs {OBS}; windows of {args.seq_len} ({args.burn_in} burn-in), {args.batch} per sample"
        f"{', prioritized' if args.prioritized else ''}\n"
    )
    print(f"{'phase':<44} {'RssAnon MB':>10}")
    for name, mb in rows:
        print(f"{name:<44} {mb:>10.0f}")
    print(
        f"\nmemmap on disk: {disk / 2**30:.2f} GiB ({per_step} bytes per transition); "
        f"filled in {fill_s:.1f} s"
    )
    print(
        f"peak RssAnon with the memmap buffer: {peak:.0f} MB "
        f"({'under' if peak < 500 else 'OVER'} the 500 MB goal)"
    )
    print(
        f"in-RAM alternative: {computed:,.0f} MB computed from the bytes per transition; "
        f"{measured:,.0f} MB measured on a {len(ram):,}-transition in-RAM buffer, scaled x"
        f"{args.transitions / len(ram):.0f}"
    )
    print(f"\n{'sampling':<44} {'sequences/s':>12}")
    print(f"{'memmap, ' + format(args.transitions, ',') + ' transitions':<44} {mm_rate:>12,.0f}")
    print(
        f"{'in RAM, ' + format(len(ram), ',') + ' transitions (reference)':<44} {ram_rate:>12,.0f}"
    )
    print(f"{'ratio memmap / in RAM':<44} {mm_rate / ram_rate:>12.2f}")


if __name__ == "__main__":
    main()
