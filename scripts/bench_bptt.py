"""The cost of PPO's ``loss.bptt_horizon``: wall time per frame against the horizon, per memory.

    PYTHONPATH=. python scripts/bench_bptt.py [--reps 3] [--policies gru,lstm] \
        [--horizons 64,128,256] [overrides...]

For each policy: runs ``rltool train env=tmaze env.kwargs.length=1000 policy=<p>`` builds with
each horizon (and without: the reference), the context filled to its full H - T steps (a
1000-step corridor: no episode starts inside it), then one collected rollout and its update
timed ``--reps`` times, the horizons alternated within each repetition (none, 64, 128, ...,
none, 64, ...) so that the machine's load hits all; the policy and Adam are restored before each
update, so every update does the same work. Wall per frame = (collect + update) / frames of the
rollout. Prints a markdown table (medians; the ratio against no horizon in the same run) and the
load (``uptime``). Extra arguments are config overrides for every build.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

from rltool import compose
from rltool.losses import add_gae
from rltool.train import build, update

ENV = ["env=tmaze", "env.kwargs.length=1000"]


def setup(policy: str, horizon: int | None, overrides: list[str]):
    """A built run with its context full, its state to restore before each update, and a rollout."""
    h = "null" if horizon is None else horizon
    cfg = compose(*ENV, f"policy={policy}", f"loss.bptt_horizon={h}", "seed=0", *overrides)
    run = build(cfg)
    t = cfg.collector.frames_per_batch // cfg.env.num_envs
    if run.algo.context is not None:
        for _ in range(-(-run.algo.context.length // t)):
            kept = run.collector.collect().clone()
            add_gae(kept, cfg.loss.gamma, cfg.loss.gae_lambda)  # the loss's entries it keeps
            run.algo.context.extend(kept)
    t0 = time.perf_counter()
    batch = run.collector.collect().clone()
    collect = time.perf_counter() - t0
    saved = copy.deepcopy(
        (run.policy.state_dict(), run.optimizer.state_dict(), _context(run.algo.context))
    )
    return run, batch, saved, collect


def _context(ctx):
    return None if ctx is None else ctx.state_dict()


def timed_update(run, batch, saved) -> float:
    run.policy.load_state_dict(saved[0])
    run.optimizer.load_state_dict(saved[1])
    if saved[2] is not None:
        run.algo.context.load_state_dict(copy.deepcopy(saved[2]))
    t0 = time.perf_counter()
    update(run, batch.clone(), 0.5, 0)
    return time.perf_counter() - t0


def bench(policy: str, horizons: list[int | None], reps: int, overrides: list[str]) -> list[str]:
    runs = {h: setup(policy, h, overrides) for h in horizons}
    for h in horizons:  # warm-up: lanes, allocator
        run, batch, saved, _ = runs[h]
        timed_update(run, batch, saved)
    times = {h: [] for h in horizons}
    for _ in range(reps):
        for h in horizons:
            run, batch, saved, _ = runs[h]
            times[h].append(timed_update(run, batch, saved))
    rows, base = [], None
    for h in horizons:
        run, batch, _, collect = runs[h]
        frames = batch.numel()
        per_frame = (collect + statistics.median(times[h])) / frames
        base = per_frame if base is None else base
        ctx = 0 if run.algo.context is None else run.algo.context.length
        rows.append(
            f"| {policy} | {h or 'null'} | {ctx} | {statistics.median(times[h]):.3f} | "
            f"{per_frame * 1e3:.3f} | {per_frame / base:.2f}x |"
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--policies", default="lstm,gru,mingru,ffm,trxl")
    ap.add_argument("--horizons", default="64,128,256")
    args, overrides = ap.parse_known_args()
    horizons = [None, *(int(h) for h in args.horizons.split(","))]
    print("| policy | bptt_horizon | context steps | update s (median) | ms / frame | vs null |")
    print("|---|---|---|---|---|---|")
    for policy in args.policies.split(","):
        for row in bench(policy, horizons, args.reps, overrides):
            print(row, flush=True)
    print(f"\nload: {os.getloadavg()}")


if __name__ == "__main__":
    main()
