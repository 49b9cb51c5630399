"""Whole-run time of the GRU preset against the LSTM preset (and GRU variants), same seeds.

Each case is one ``rltool train env=cartpole_pomdp policy=...`` subprocess at the preset's own
settings (``total_frames`` from ``--frames``, the preset's 100k by default), one torch thread; the
cases run one after the other, alternated per seed (lstm, gru, gru-torch, lstm, gru, ...), so a
busy machine slows them alike. Per run it prints the wall seconds and the CPU seconds (user +
system of the child: what one core did, less sensitive to load); the last lines are the median of
each case's ratio to the LSTM on the same seed.

    python scripts/bench_gru.py                                   # seeds 400-402, 100k frames
    python scripts/bench_gru.py --seeds 1 --frames 20480 --cases lstm,gru   # a smoke test
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "lstm": ["policy=lstm"],
    "gru": ["policy=gru"],  # the shipped default kernel
    "gru-torch": ["policy=gru", "policy.memory.kernel=torch"],
    "gru-rltool": ["policy=gru", "policy.memory.kernel=rltool"],
}


def run(case: str, seed: int, frames: int, root: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one whole training run."""
    cmd = [
        sys.executable, "-m", "rltool", "train", "env=cartpole_pomdp", *CASES[case],
        f"seed={seed}", f"total_frames={frames}", "num_threads=1", "logger.progress=none",
        f"hydra.run.dir={root / f'{case}-{seed}'}",
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{case} seed {seed} failed:\n{proc.stderr.read()[-2000:]}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--seed0", type=int, default=400, help="first seed (off the seed protocol's)")
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--cases", default="lstm,gru,gru-torch", help=f"of {','.join(CASES)}")
    a = p.parse_args()
    cases = a.cases.split(",")
    if cases[0] != "lstm" or any(c not in CASES for c in cases):
        raise SystemExit(f"--cases: start with lstm, then any of {', '.join(CASES)}")
    times: dict[str, list[tuple[float, float]]] = {c: [] for c in cases}
    print(f"load before: {os.getloadavg()[0]:.2f}")
    print("| seed | case | wall s | CPU s | wall / lstm | CPU / lstm |\n|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(a.seed0, a.seed0 + a.seeds):
            for case in cases:
                wall, cpu = run(case, seed, a.frames, Path(tmp))
                times[case].append((wall, cpu))
                base = times["lstm"][-1]
                print(f"| {seed} | {case} | {wall:.1f} | {cpu:.1f} | "
                      f"{wall / base[0]:.2f}x | {cpu / base[1]:.2f}x |", flush=True)  # fmt: skip
    print(f"load after: {os.getloadavg()[0]:.2f}")
    for case in cases[1:]:
        pairs = list(zip(times[case], times["lstm"], strict=True))
        wall = statistics.median(w / b[0] for (w, _), b in pairs)
        cpu = statistics.median(c / b[1] for (_, c), b in pairs)
        print(f"{case} / lstm, median over {a.seeds} seeds: wall {wall:.2f}x, CPU {cpu:.2f}x")


if __name__ == "__main__":
    main()
