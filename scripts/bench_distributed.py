"""Frames per second of one run on 1 and on 2 ranks, PPO on a shipped recurrent preset.

One rank is plain ``rltool train`` (not the distributed path); two ranks are ``rltool train
distributed.nproc_per_node=2`` (gloo, ``sync_fraction`` off). Each rank runs one torch thread and
the same envs (``--envs``, default 8) and rollout (the preset's ``frames_per_batch``), so two
ranks collect twice the frames per update; the two-rank run gets twice the budget, so both do the
same number of updates. ``--case`` picks the preset:

  lstm      env=cartpole_pomdp policy=lstm: a 43k-parameter LSTM, 1,024 frames and 80 optimizer
            steps of ~6 ms per update; the all-reduce per step is a large share
  minigrid  env=minigrid policy=lstm (MiniGrid-MemoryS7): a CNN + LSTM of 456k parameters, 256
            frames and 20 optimizer steps of ~75 ms per update; compute dominates

Speed is the frames between the first and the last training row (the final evaluation left out)
over the wall time between them, from ``metrics.csv``. The runs alternate (1, 2, 1, 2, ...) so
that a busy machine slows both alike; the ratio of each pair is printed, then a markdown table,
the load average before and after, and the last line is the median ratio as ``N.NNx``.

    python scripts/bench_distributed.py                     # lstm: 3 pairs, 40,960 frames per rank
    python scripts/bench_distributed.py --case minigrid     # 3 pairs, 4,096 frames per rank
    python scripts/bench_distributed.py --bucket-mb 0.05    # + 2 ranks with distributed.bucket_mb
    python scripts/bench_distributed.py --pairs 1 --frames 4096 --envs 4   # a smoke test
    python scripts/bench_distributed.py --ceiling   # and two plain runs side by side, per pair
    python scripts/bench_distributed.py --gloo      # and 2 ranks summing through gloo, per pair

Two ranks on one host sum their gradients through shared memory (``distributed.shared_memory``,
on by default); ``--gloo`` adds a run to each pair that sums through gloo's all-reduce instead.
``--bucket-mb X`` adds a run to each pair: 2 ranks whose gradients are all-reduced in
buckets of X MB while backward runs (``distributed.bucket_mb``), against the 2 ranks of the same
pair (one buffer after backward). ``--ceiling`` times what two processes get from the machine
with no communication at all (two plain runs at once, their frames/s summed): the ratio two ranks
can reach at best here. The ranks import this checkout's rltool (PYTHONPATH).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# case -> (the preset's overrides, default frames per rank)
CASES = {
    "lstm": (("env=cartpole_pomdp", "policy=lstm"), 40_960),
    "minigrid": (("env=minigrid", "policy=lstm"), 4_096),
}


def command(case: str, ranks: int, frames: int, envs: int, run_dir: Path, extra=()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rltool",
        "train",
        *CASES[case][0],
        f"env.num_envs={envs}",
        f"total_frames={frames * ranks}",
        f"eval.every_frames={10 * frames * ranks}",  # the final evaluation only
        "eval.final_episodes=2",
        "eval.episodes=2",
        "checkpoint.every_frames=null",
        "checkpoint.save_best=false",
        "logger.progress=none",
        "num_threads=1",
        *([f"distributed.nproc_per_node={ranks}"] if ranks > 1 else []),
        *extra,
        f"hydra.run.dir={run_dir}",
    ]


def speed(run_dir: Path) -> float:
    """Frames per second between the first and the last training row."""
    with (run_dir / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    if len(rows) < 3:
        raise SystemExit(f"{run_dir}: fewer than 3 rows; give more --frames")
    first, last = rows[0], rows[-2]  # the last row holds the final evaluation
    frames = int(last["frames"]) - int(first["frames"])
    return frames / (float(last["time_s"]) - float(first["time_s"]))


def start(cmd: list[str]) -> subprocess.Popen:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": path}
    env.pop("HYDRA_FULL_ERROR", None)
    # a session of its own, as torch's launcher gives each rank: with the kernel's autogroup on,
    # each session is one scheduling group, so on a busy machine every process of every run gets
    # one group's share (two plain runs in the bench's session would split one share)
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, what: str) -> None:
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}): {err[-2000:]}")


def run(args, ranks: int, root: Path, name: str, extra=()) -> float:
    run_dir = root / name
    cmd = command(args.case, ranks, args.frames, args.envs, run_dir, extra)
    finish(start(cmd), name)
    return speed(run_dir)


def side_by_side(args, root: Path, n: int) -> float:
    """Two plain one-rank runs at once, no communication: their frames/s summed, the most two
    processes get from this machine (shared caches, memory bandwidth, clock)."""
    dirs = [root / f"pair{n}-{i}" for i in range(2)]
    procs = [start(command(args.case, 1, args.frames, args.envs, d)) for d in dirs]
    for p in procs:
        finish(p, "side-by-side run")
    return sum(speed(d) for d in dirs)


def pair(args, root: Path, n: int) -> dict[str, float]:
    """One pair's frames/s: 1 rank, 2 ranks, then what the options add, in that order."""
    out = {"1 rank": run(args, 1, root, f"ranks1-{n}")}
    out["2 ranks"] = run(args, 2, root, f"ranks2-{n}")
    if args.gloo:
        extra = ("distributed.shared_memory=off",)
        out["2 ranks, gloo"] = run(args, 2, root, f"gloo-{n}", extra)
    if args.bucket_mb is not None:
        extra = (f"distributed.bucket_mb={args.bucket_mb}",)
        out["2 ranks, buckets"] = run(args, 2, root, f"buckets-{n}", extra)
    if args.ceiling:
        out["side by side"] = side_by_side(args, root, n)
    return out


def ratios(row: dict[str, float]) -> dict[str, float]:
    """The ratios the table shows: each run over 1 rank, and the buckets over one buffer."""
    out = {f"{k} / 1": v / row["1 rank"] for k, v in row.items() if k != "1 rank"}
    if "2 ranks, gloo" in row:
        out["shared / gloo"] = row["2 ranks"] / row["2 ranks, gloo"]
    if "2 ranks, buckets" in row:
        out["buckets / one buffer"] = row["2 ranks, buckets"] / row["2 ranks"]
    return out


def table(rows: list[dict[str, float]]) -> list[str]:
    """A markdown table: frames/s and ratios per pair, and the medians of the ratios."""
    speeds, shares = list(rows[0]), list(ratios(rows[0]))
    lines = [f"| pair | {' | '.join(speeds + shares)} |", "|---" * (1 + len(speeds + shares)) + "|"]
    for n, row in enumerate(rows):
        r = ratios(row)
        cells = [f"{row[k]:,.0f}" for k in speeds] + [f"{r[k]:.2f}x" for k in shares]
        lines.append(f"| {n} | {' | '.join(cells)} |")
    medians = [f"**{statistics.median(ratios(row)[k] for row in rows):.2f}x**" for k in shares]
    lines.append("| median |" + " |" * len(speeds) + f" {' | '.join(medians)} |")
    return lines


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg()) + f" (1/5/15 min, {os.cpu_count()} cores)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", choices=sorted(CASES), default="lstm")
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--frames", type=int, help="frames per rank (default: the case's)")
    parser.add_argument("--envs", type=int, default=8, help="envs per rank")
    parser.add_argument(
        "--bucket-mb",
        type=float,
        help="also time 2 ranks with distributed.bucket_mb=X (all-reduce during backward)",
    )
    parser.add_argument(
        "--gloo",
        action="store_true",
        help="also time 2 ranks summing through gloo (distributed.shared_memory=off)",
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also time two plain runs side by side: the machine's own limit for two processes",
    )
    args = parser.parse_args()
    args.frames = args.frames or CASES[args.case][1]
    print(f"$ python scripts/bench_distributed.py {' '.join(sys.argv[1:])}")
    print(
        f"{datetime.date.today()}: {' '.join(CASES[args.case][0])}, {args.frames:,} frames and "
        f"{args.envs} envs per rank, 1 torch thread per rank, frames/s of all ranks; load {load()}",
        flush=True,
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-dist-") as tmp:
        for n in range(args.pairs):
            rows.append(pair(args, Path(tmp), n))
            cells = [f"{k} {v:,.0f}" for k, v in rows[-1].items()]
            cells += [f"{k} {v:.2f}x" for k, v in ratios(rows[-1]).items()]
            print(f"pair {n}: {', '.join(cells)}", flush=True)
    print("\n".join(table(rows)))
    print(f"load after: {load()}")
    print(f"{statistics.median(r['2 ranks'] / r['1 rank'] for r in rows):.2f}x")


if __name__ == "__main__":
    main()
