"""compile=true against eager: whole ``rltool train`` runs, compile time included.

Each case runs as a subprocess, eager and compiled alternated (A, B, A, B, ...) so that the
machine's load hits both; the figure is the run's frames / its wall time (``summary.json``:
the loop's clock, which holds the compilation, done at the first calls, and the evaluations).
The presets' own settings apply (``num_threads=1``). Prints a markdown table and the load.

    python scripts/bench_compile.py [--repeats 2] [--cases mlp,lstm,gru,minigrid] [--frames-scale 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name -> (overrides, total_frames): the CartPole MLP preset at its own budget (the schema's
# total_frames), the memory presets at reduced budgets (the table says which)
CASES = {
    "mlp": (["env=cartpole", "policy=mlp"], 100_000),
    "lstm": (["env=cartpole_pomdp", "policy=lstm"], 20_480),
    "gru": (["env=cartpole_pomdp", "policy=gru"], 20_480),
    "minigrid": (["task=MemoryS7", "policy=lstm"], 10_240),
}


def one_run(overrides: list[str], frames: int, compiled: bool, folder: Path) -> dict:
    """One ``rltool train`` in a subprocess: frames/s by the run's clock and the process's."""
    run_dir = folder / f"{'compiled' if compiled else 'eager'}-{time.time_ns()}"
    args = [
        *overrides,
        f"total_frames={frames}",
        f"compile={str(compiled).lower()}",
        "logger.progress=none",
        f"hydra.run.dir={run_dir}",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "rltool", "train", *args],
        check=True,
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    process_s = time.perf_counter() - t0
    summary = json.loads((run_dir / "summary.json").read_text())
    return {
        "fps": summary["frames"] / summary["wall_time_s"],
        "process_fps": summary["frames"] / process_s,
        "eval": summary.get("eval/return_mean", float("nan")),
    }


def bench(name: str, repeats: int, scale: float, folder: Path) -> dict:
    overrides, frames = CASES[name]
    frames = int(frames * scale)
    runs = {False: [], True: []}
    for _ in range(repeats):
        for compiled in (False, True):  # alternated: the load hits both
            runs[compiled].append(one_run(overrides, frames, compiled, folder))
            print(f"  {name} compile={compiled}: {runs[compiled][-1]}", file=sys.stderr)
    med = {c: statistics.median(r["fps"] for r in runs[c]) for c in runs}
    pmed = {c: statistics.median(r["process_fps"] for r in runs[c]) for c in runs}
    return {
        "case": name,
        "overrides": " ".join(overrides),
        "frames": frames,
        "eager": med[False],
        "compiled": med[True],
        "ratio": med[True] / med[False],
        "process_ratio": pmed[True] / pmed[False],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--frames-scale", type=float, default=1.0)
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(c, a.repeats, a.frames_scale, Path(tmp)) for c in a.cases.split(",")]
    head = "| case | overrides | frames | eager frames/s | compiled frames/s | ratio "
    head += "| process ratio |"
    print(head + "\n|---|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['case']} | `{r['overrides']}` | {r['frames']:,} | {r['eager']:,.0f} | "
            f"{r['compiled']:,.0f} | {r['ratio']:.2f}x | {r['process_ratio']:.2f}x |"
        )
    print("load:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    main()
