"""Frames per second of one run on 1 and on 2 ranks: PPO-LSTM on masked CartPole.

One rank is plain ``rltool train`` (not the distributed path); two ranks are ``rltool train
distributed.nproc_per_node=2`` (gloo, ``sync_fraction`` off). Each rank runs one torch thread and
the same envs (``--envs``, default 8) and rollout (``frames_per_batch`` of the tuned preset:
1,024), so two ranks collect twice the frames per update; the two-rank run gets twice the budget,
so both do the same number of updates. Speed is the frames between the first and the last
training row (the final evaluation left out) over the wall time between them, from
``metrics.csv``. The runs alternate (1, 2, 1, 2, ...) so that a busy machine slows both alike;
the ratio of each pair is printed, and the last line is the median ratio as ``N.NNx``.

    python scripts/bench_distributed.py                     # 3 pairs, 40,960 frames per rank
    python scripts/bench_distributed.py --pairs 1 --frames 4096 --envs 4   # a smoke test
    python scripts/bench_distributed.py --ceiling   # and two plain runs side by side, per pair

``--ceiling`` times what two processes get from the machine with no communication at all (two
plain runs at once, their frames/s summed): the ratio two ranks can reach at best here.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def command(ranks: int, frames: int, envs: int, run_dir: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "rltool",
        "train",
        "env=cartpole_pomdp",
        "policy=lstm",
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


def start(ranks: int, frames: int, envs: int, run_dir: Path) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    cmd = command(ranks, frames, envs, run_dir)
    return subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def finish(proc: subprocess.Popen, what: str) -> None:
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}): {err[-2000:]}")


def run(ranks: int, frames: int, envs: int, root: Path, n: int) -> float:
    run_dir = root / f"ranks{ranks}-{n}"
    finish(start(ranks, frames, envs, run_dir), f"{ranks} rank(s)")
    return speed(run_dir)


def side_by_side(frames: int, envs: int, root: Path, n: int) -> float:
    """Two plain one-rank runs at once, no communication: their frames/s summed, the most two
    processes get from this machine (shared caches, memory bandwidth, clock)."""
    dirs = [root / f"pair{n}-{i}" for i in range(2)]
    procs = [start(1, frames, envs, d) for d in dirs]
    for p in procs:
        finish(p, "side-by-side run")
    return sum(speed(d) for d in dirs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--frames", type=int, default=40_960, help="frames per rank")
    parser.add_argument("--envs", type=int, default=8, help="envs per rank")
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also time two plain runs side by side: the machine's own limit for two processes",
    )
    args = parser.parse_args()
    ratios, ceilings = [], []
    with tempfile.TemporaryDirectory(prefix="bench-dist-") as tmp:
        for n in range(args.pairs):
            one = run(1, args.frames, args.envs, Path(tmp), n)
            two = run(2, args.frames, args.envs, Path(tmp), n)
            ratios.append(two / one)
            line = f"pair {n}: 1 rank {one:,.0f} frames/s, 2 ranks {two:,.0f}: {two / one:.2f}x"
            if args.ceiling:
                both = side_by_side(args.frames, args.envs, Path(tmp), n)
                ceilings.append(both / one)
                line += f"; two plain runs side by side {both:,.0f}: {both / one:.2f}x"
            print(line, flush=True)
    if ceilings:
        ceiling = statistics.median(ceilings)
        print(f"two plain runs side by side (the machine's ceiling): {ceiling:.2f}x")
    print(f"{statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
