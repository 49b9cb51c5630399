"""The cost of PPO's ``loss.refresh_states``: one update with and without, alternated.

    PYTHONPATH=. python scripts/bench_refresh.py [--reps 4] [--policies lstm,gru] [overrides...]

For each policy: the run ``rltool train env=cartpole_pomdp policy=<p>`` builds (its tuned
settings: 8 envs x 128 steps, 4 minibatches, 20 epochs), two collected rollouts, then the update
of the second timed ``--reps`` times with the refresh off and on, alternated (off, on, off, on...)
so that the machine's load hits both; the policy and Adam are restored before each, so every
update does the same work. Also timed alone: one refresh (the no-grad memory pass over the
previous rollout), which an update runs ``epochs - 1`` times. Prints a markdown table (medians)
and the load (``uptime``) beside it. Extra arguments are config overrides for both.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time

import torch

from rltool import compose
from rltool.train import build, update


def setup(policy: str, overrides: list[str]):
    """A built run, its state to restore before each update, and two consecutive rollouts."""
    cfg = compose("env=cartpole_pomdp", f"policy={policy}", *overrides)
    run = build(cfg)
    kept = run.algo.keep(run.collector.collect())
    batch = run.collector.collect().clone()
    saved = copy.deepcopy((run.policy.state_dict(), run.optimizer.state_dict()))
    return run, kept, batch, saved


def timed_update(run, kept, batch, saved, refresh: bool) -> float:
    run.policy.load_state_dict(saved[0])
    run.optimizer.load_state_dict(saved[1])
    run.algo.refresh, run.algo.previous = refresh, kept if refresh else None
    t0 = time.perf_counter()
    update(run, batch.clone(), 0.5, 0)
    return time.perf_counter() - t0


def timed_refresh(run, kept, batch, n: int = 10) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        run.algo.refreshed(batch, kept)
    return (time.perf_counter() - t0) / n


def bench(policy: str, reps: int, overrides: list[str]) -> str:
    run, kept, batch, saved = setup(policy, overrides)
    timed_update(run, kept, batch, saved, True)  # warm-up: lanes, allocator
    times = {False: [], True: []}
    for _ in range(reps):
        for refresh in (False, True):
            times[refresh].append(timed_update(run, kept, batch, saved, refresh))
    one = timed_refresh(run, kept, batch)
    run.collector.close()
    off, on = statistics.median(times[False]), statistics.median(times[True])
    c = run.cfg
    shape = f"{c.env.num_envs} x {c.collector.frames_per_batch // c.env.num_envs}"
    return (
        f"| {policy} | {shape}, {c.loss.epochs} epochs x {c.loss.num_minibatches} | "
        f"{off * 1e3:.0f} | {on * 1e3:.0f} | {on / off:.2f}x | {one * 1e3:.1f} |"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=4)
    p.add_argument("--policies", default="lstm,gru")
    args, overrides = p.parse_known_args()
    rows = [bench(policy, args.reps, overrides) for policy in args.policies.split(",")]
    print(
        "| policy | rollout, epochs x minibatches | update off (ms) | update on (ms) "
        "| on / off | one refresh (ms) |"
    )
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\nload: {os.getloadavg()[0]:.2f} (1 min), {os.cpu_count()} cores")
    print(f"uptime: {os.popen('uptime').read().strip()}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
