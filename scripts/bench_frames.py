"""Frames to threshold on a population of seeds: rltool against stable-baselines3 at the peers'
own settings (bench_ppo.py's cases: mlp vs SB3 PPO, CartPole, 475; lstm vs sb3-contrib
RecurrentPPO, CartPole without velocities, 450), one run at a time.

Both sides are bench_ppo.py's runs (run_rltool, run_sb3): evaluated at the same frame counts
(after the update of the rollout that reaches each multiple of --eval-every, then at the end of
the budget) by the same evaluator (rltool.run.evaluation: greedy actions, observation statistics as
training left them, not updated while evaluating). A seed's frames to threshold is its first
evaluation at or above the threshold, the budget's frames when none reaches it (as
rltool.analysis.stats.frames_to_goal counts). Reported: the IQM over seeds with a 95% stratified
bootstrap interval and P(rltool needs fewer frames) (ties half) from rltool.analysis.stats,
the IQM of the final evaluations, the seeds that reached the threshold, the training frames/s
(median).

Each finished (case, seed, side) is appended to --results (JSON lines) and skipped when found
there, so a population can be run in parts and summarised at once:

    python scripts/bench_frames.py --case mlp --seeds 100-119
    python scripts/bench_frames.py --case lstm --seeds 100-119 --results lstm.jsonl
    python scripts/bench_frames.py --case lstm --seeds 100-119 --results lstm.jsonl --summary

One difference switched alone on rltool's side (rltool config overrides), against the peer's
runs of a baseline population (not run again: a seeded run is deterministic):

    python scripts/bench_frames.py --case mlp --seeds 100-109 --results vf1.jsonl \
        --rltool-override loss.value_coef=1.0 --peer-results bench_frames_mlp.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import bench_ppo
import numpy as np
import torch

from rltool.analysis import stats

SIDES = ("rltool", "sb3")


def frames_to_threshold(evals, threshold: float, budget: float) -> float:
    """The frames of the first evaluation (frames, return) at or above ``threshold``; ``budget``
    when none reaches it (the most the seed could have cost)."""
    return float(min(bench_ppo.first_reach(evals, threshold), budget))


def parse_seeds(text: str) -> list[int]:
    """``100-119`` or ``100,103,107`` (or both: ``100-104,110``)."""
    seeds: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        seeds += range(int(lo), int(hi or lo) + 1)
    return seeds


def load(path: Path) -> dict[tuple[str, int, str], dict]:
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {(r["case"], r["seed"], r["side"]): r for r in rows}


def run_one(
    case: str, seed: int, side: str, frames: int, eval_every: int, extra: tuple[str, ...] = ()
) -> dict:
    """One run of one side; ``extra``: rltool config overrides (rltool's side only)."""
    cfg = bench_ppo.rltool_config(case, seed, frames, eval_every)
    if side == "rltool":
        fps, evals, _ = bench_ppo.run_rltool(case, seed, frames, eval_every, extra)
    else:
        fps, evals, _ = bench_ppo.run_sb3(case, seed, frames, eval_every, cfg)
    return {
        "case": case,
        "seed": seed,
        "side": side,
        "frames": frames,
        "eval_every": eval_every,
        "overrides": list(extra) if side == "rltool" else [],
        "fps": fps,
        "evals": [[int(f), float(r)] for f, r in evals],
    }


def summary(rows: dict, case: str, seeds: list[int], threshold: float, budget: float) -> str:
    """The verdict table (markdown) over the seeds both sides have finished."""
    done = [s for s in seeds if all((case, s, side) in rows for side in SIDES)]
    if not done:
        return f"case {case}: no seed finished on both sides"
    for s in done:  # the same evaluation points, or the comparison is not like for like
        ours, theirs = (rows[case, s, side]["evals"] for side in SIDES)
        if [f for f, _ in ours] != [f for f, _ in theirs]:
            raise SystemExit(f"seed {s}: the sides evaluated at different frame counts")
    reach = {
        side: np.array(
            [frames_to_threshold(rows[case, s, side]["evals"], threshold, budget) for s in done]
        )
        for side in SIDES
    }
    finals = {side: np.array([rows[case, s, side]["evals"][-1][1] for s in done]) for side in SIDES}
    enough = len(done) >= stats.MIN_SEEDS

    def interval(x):
        if not enough:
            return f"{stats.iqm(x):,.0f}"
        point, lo, hi = stats.intervals(x)["iqm"]
        return f"{point:,.0f} [{lo:,.0f}, {hi:,.0f}]"

    names = {"rltool": "rltool", "sb3": bench_ppo_peer(case)}
    lines = [
        f"case {case}, {len(done)} seeds ({compact(done)}), threshold {threshold:.0f}, "
        f"budget {budget:,.0f} frames; IQM [95% bootstrap interval]",
        "",
        f"| side | frames to {threshold:.0f}, IQM | seeds reaching | final eval, IQM | "
        "final eval, median | train frames/s, median |",
        "|---|---|---|---|---|---|",
    ]
    for side in SIDES:
        fps = statistics.median(rows[case, s, side]["fps"] for s in done)
        lines.append(
            f"| {names[side]} | {interval(reach[side])} | "
            f"{int((reach[side] < budget).sum())}/{len(done)} | "
            f"{interval(finals[side])} | {np.median(finals[side]):.0f} | {fps:,.0f} |"
        )
    if enough:  # P(rltool fewer frames) = P(-rltool's > -peer's); [runs, 1 task]
        p, lo, hi = stats.improvement(-reach["rltool"][:, None], -reach["sb3"][:, None])
        lines.append(f"\nP(rltool needs fewer frames) = {p:.2f} [{lo:.2f}, {hi:.2f}]")
        p, lo, hi = stats.improvement(finals["rltool"][:, None], finals["sb3"][:, None])
        lines.append(f"P(rltool's final eval higher) = {p:.2f} [{lo:.2f}, {hi:.2f}]")
    lines.append(
        "\nper seed (frames to threshold rltool / peer; finals): "
        + ", ".join(
            f"{s}: {reach['rltool'][i]:,.0f} / {reach['sb3'][i]:,.0f}; "
            f"{finals['rltool'][i]:.0f} / {finals['sb3'][i]:.0f}"
            for i, s in enumerate(done)
        )
    )
    return "\n".join(lines)


def bench_ppo_peer(case: str) -> str:
    return "sb3-contrib RecurrentPPO" if case == "lstm" else "SB3 PPO"


def compact(seeds: list[int]) -> str:
    """[100, 101, 102, 105] -> '100-102,105'."""
    parts, start = [], None
    for i, s in enumerate(seeds):
        start = s if start is None else start
        if i + 1 == len(seeds) or seeds[i + 1] != s + 1:
            parts.append(f"{start}-{s}" if s != start else f"{s}")
            start = None
    return ",".join(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--case", choices=sorted(bench_ppo.CASES), default="mlp")
    p.add_argument("--seeds", default="100-119", help="e.g. 100-119 or 100,105 (never tuned on)")
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument(
        "--eval-every",
        type=int,
        default=2_560,
        help="frames between evaluations (a multiple of the 256-frame rollout: both sides\n"
        "evaluate after exactly that many frames' updates)",
    )
    p.add_argument("--results", help="JSON lines of finished runs (default: bench_frames_<case>)")
    p.add_argument("--summary", action="store_true", help="only summarise --results")
    p.add_argument(
        "--rltool-override",
        action="append",
        default=[],
        help="an rltool config override after the case's (repeatable): one difference alone",
    )
    p.add_argument(
        "--peer-results",
        help="take the peer's runs from this results file (a baseline population's) instead\n"
        "of running them",
    )
    a = p.parse_args()
    seeds, threshold = parse_seeds(a.seeds), bench_ppo.CASES[a.case]["threshold"]
    results = Path(a.results or f"bench_frames_{a.case}.jsonl")
    torch.set_num_threads(1)
    rows, extra = load(results), tuple(a.rltool_override)
    if any(k[2] == "rltool" and r.get("overrides", []) != list(extra) for k, r in rows.items()):
        p.error(f"{results} holds rltool runs with other overrides: give another --results")
    sides = SIDES
    if a.peer_results:
        rows |= {k: r for k, r in load(Path(a.peer_results)).items() if k[2] != "rltool"}
        sides = ("rltool",)
    if not a.summary:
        for seed in seeds:
            for side in sides:
                if (a.case, seed, side) in rows:
                    continue
                row = run_one(a.case, seed, side, a.frames, a.eval_every, extra)
                with results.open("a") as f:
                    f.write(json.dumps(row) + "\n")
                rows[a.case, seed, side] = row
                reach = frames_to_threshold(row["evals"], threshold, a.frames)
                print(
                    f"{a.case} seed {seed} {side}: {row['fps']:,.0f} frames/s, frames to "
                    f"{threshold:.0f} {reach:,.0f}, final {row['evals'][-1][1]:.1f}",
                    flush=True,
                )
    if extra:
        print("rltool overrides:", " ".join(extra))
    print(summary(rows, a.case, seeds, threshold, a.frames))


if __name__ == "__main__":
    main()
