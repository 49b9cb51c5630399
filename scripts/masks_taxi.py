"""Learning with and without action masks on gymnasium's Taxi-v4 (``info["action_mask"]``).

    python scripts/masks_taxi.py [frames=200000] [seeds=3] [goal=0]

PPO with an MLP, per seed, once with ``env.action_mask=auto`` (finds Taxi's info mask) and once
with ``none``; prints the frames at which the periodic evaluation first reached ``goal`` and the
final evaluation's mean return. Runs go to a temporary folder.
"""

from __future__ import annotations

import csv
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's rltool

import rltool  # noqa: E402


def main(frames: int = 200_000, seeds: int = 3, goal: float = 0.0) -> None:
    root = Path(tempfile.mkdtemp(prefix="masks-taxi-"))
    print(f"Taxi-v4, PPO mlp, {frames} frames, goal: eval return >= {goal}")
    print(f"{'mask':6} {'seed':>4} {'frames to goal':>15} {'final eval':>11}")
    for mask in ("auto", "none"):
        for seed in range(seeds):
            cfg = rltool.compose(
                "env=gym",
                "env.id=Taxi-v4",
                f"env.action_mask={mask}",
                f"total_frames={frames}",
                f"eval.every_frames={frames // 20}",
                "eval.episodes=8",
                "eval.final_episodes=32",
                "loss.entropy_coef=0.01",
                "logger.progress=none",
                f"seed={seed}",
            )
            out = root / f"{mask}-{seed}"
            summary = rltool.fit(cfg, out)
            with open(out / "metrics.csv") as f:
                rows = [r for r in csv.DictReader(f) if r.get("eval/return_mean")]
            hit = next((r["frames"] for r in rows if float(r["eval/return_mean"]) >= goal), "-")
            final = summary.get("final_eval", {}).get(
                "eval/return_mean", rows[-1]["eval/return_mean"]
            )
            print(f"{mask:6} {seed:>4} {hit:>15} {float(final):>11.1f}", flush=True)


if __name__ == "__main__":
    kw = dict(a.split("=", 1) for a in sys.argv[1:])
    main(int(kw.get("frames", 200_000)), int(kw.get("seeds", 3)), float(kw.get("goal", 0)))
