"""Same seeded runs, same metrics: runs a fixed set of short trainings with one checkout and diffs
their ``metrics.csv`` rows (time columns aside) against another set.

    python scripts/compare_runs.py run OUT [--repo PATH]   # the cases, with the code at PATH
    python scripts/compare_runs.py diff A B                # row by row; exit 1 on any difference

``--repo`` points at another checkout (a ``git worktree`` of the old commit) so that a refactor
can be checked against the code before it: ``run /tmp/before --repo /tmp/old`` then
``run /tmp/after`` then ``diff /tmp/before /tmp/after``.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
from pathlib import Path

FRAMES = "total_frames=10000"
CASES = {
    "ppo_mlp_pomdp": ["env=cartpole_pomdp", "policy=mlp", FRAMES],
    "ppo_lstm_pomdp": ["env=cartpole_pomdp", "policy=lstm", FRAMES],
    "ppo_gru_pomdp": ["env=cartpole_pomdp", "policy=gru", FRAMES],
    "ppo_pendulum": ["experiment=pendulum_ppo", FRAMES],
    "dqn_mlp_cartpole": ["env=cartpole", "policy=mlp", "loss=dqn", FRAMES],
    "dqn_gru_pomdp": ["env=cartpole_pomdp", "policy=gru", "loss=dqn", FRAMES],
    "ppo_trxl_pomdp": ["env=cartpole_pomdp", "policy=trxl", FRAMES],
    "ppo_ffm_pomdp": ["env=cartpole_pomdp", "policy=ffm", FRAMES],
    # Taxi's info["action_mask"], found by env.action_mask=auto; a memory acting on masked heads
    "ppo_lstm_taxi_masked": [
        "env=gym",
        "env.id=Taxi-v4",
        "env.action_mask=auto",
        "policy=lstm",
        FRAMES,
    ],
}
# killed (SIGKILL) while writing its second checkpoint, then resumed from the first: its rows must
# match a run that never stopped
RESUMED = (
    "ppo_lstm_resumed",
    ["env=cartpole_pomdp", "policy=lstm", "seed=3", FRAMES, "checkpoint.every_frames=4096"],
)
TIME_COLUMNS = ("time", "fps")


def rltool(repo: Path, args: list[str], **env: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(repo), "WANDB_MODE": "disabled", **env}
    cmd = [sys.executable, "-m", "rltool", "train", *args, "logger.progress=none"]
    return subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL).returncode


def run_cases(out: Path, repo: Path) -> None:
    for name, args in CASES.items():
        print(f"{name}: {' '.join(args)}", flush=True)
        if rltool(repo, [*args, f"hydra.run.dir={out / name}"]) != 0:
            raise SystemExit(f"{name} failed")
    name, args = RESUMED
    print(f"{name}: {' '.join(args)}, killed at its 2nd checkpoint, resumed", flush=True)
    rc = rltool(
        repo, [*args, f"hydra.run.dir={out / name}"], RLTOOL_CHECKPOINT_KILL="after_rename@2"
    )
    if rc != -9 or rltool(repo, [f"resume={out / name}"]) != 0:
        raise SystemExit(f"{name}: the kill or the resume did not go as planned (rc {rc})")
    if rltool(repo, [*args, f"hydra.run.dir={out / (name + '_straight')}"]) != 0:
        raise SystemExit(f"{name}_straight failed")


def rows(run: Path) -> list[dict[str, str]]:
    """The metrics rows without the columns that measure time."""
    with (run / "metrics.csv").open(newline="") as f:
        return [
            {k: v for k, v in r.items() if not k.startswith(TIME_COLUMNS)}
            for r in csv.DictReader(f)
        ]


def diff(a: Path, b: Path) -> int:
    names = sorted(p.name for p in a.iterdir() if (p / "metrics.csv").exists())
    pairs = [(n, a / n, b / n) for n in names]
    pairs.append(("resumed vs straight (B)", b / RESUMED[0], b / (RESUMED[0] + "_straight")))
    bad = 0
    print(f"{'case':<28} {'rows':>5} {'columns':>8}  result")
    for name, x, y in pairs:
        rx, ry = rows(x), rows(y)
        # a column only one side has (a metric added by the change) is named, not compared
        added = sorted(set(ry[0]) - set(rx[0])) if rx and ry else []
        gone = sorted(set(rx[0]) - set(ry[0])) if rx and ry else []
        rx = [{k: v for k, v in r.items() if k not in gone} for r in rx]
        ry = [{k: v for k, v in r.items() if k not in added} for r in ry]
        same = rx == ry
        first = next((i for i, (p, q) in enumerate(zip(rx, ry, strict=False)) if p != q), None)
        note = (
            "identical" if same else f"DIFFERENT (rows {len(rx)} vs {len(ry)}, first row {first})"
        )
        note += "".join(f"; new column {c}" for c in added)
        note += "".join(f"; column {c} gone" for c in gone)
        print(f"{name:<28} {len(rx):>5} {len(rx[0]) if rx else 0:>8}  {note}")
        bad += not same or bool(gone)
    return 1 if bad else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out", type=Path)
    r.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    args = p.parse_args()
    if args.cmd == "run":
        run_cases(args.out.resolve(), args.repo.resolve())
        return 0
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
