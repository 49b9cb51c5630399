"""The cost of ``env.check``: collection frames/s with the full space check at every step
(``always``) against the finiteness check alone (``never``; NaN / inf are caught either way),
and ``never`` against no check at all (``off``: the finiteness check stubbed out), measured in
the same run, on the CartPole MLP and the MiniGrid LSTM presets.

    PYTHONPATH=$PWD python scripts/bench_env_check.py
    PYTHONPATH=$PWD python scripts/bench_env_check.py --batches 20 --repeats 5

One thread. Each cell is the best of ``--repeats`` timings of ``--batches`` rollouts of the
preset's ``collector.frames_per_batch``, the settings alternating (best-of damps a loaded machine).
``auto`` costs what ``never`` does after its first 100 vector steps (rltool/envs/faults.py).
"""

from __future__ import annotations

import argparse
import time

import torch

import rltool
from rltool.collectors import Collector
from rltool.config.store import register_configs
from rltool.envs import make_env
from rltool.modules import make_policy

PRESETS = {"cartpole/mlp": ("env=cartpole", "policy=mlp"), "minigrid/lstm": ("env=minigrid",)}
# "off": never, and the finiteness check stubbed out too: what collection cost before the checks
SETTINGS = ("always", "never", "off")


def collector(preset: tuple[str, ...], setting: str) -> Collector:
    check = "never" if setting == "off" else setting
    cfg = rltool.compose(*preset, f"env.check={check}")
    env = make_env(cfg.env)
    if setting == "off":
        env.guard.finite = lambda *args, **kwargs: None
    policy = make_policy(cfg.policy, env.specs)
    return Collector(env, policy, cfg.collector.frames_per_batch, seed=0)


def timed(c: Collector, batches: int) -> float:
    """frames/s of ``batches`` rollouts (the full check still on for ``always``)."""
    t0 = time.perf_counter()
    for _ in range(batches):
        c.collect()
    return batches * c.T * c.B / (time.perf_counter() - t0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.set_num_threads(1)
    register_configs()
    head = "".join(f"{s + ' fps':>12}" for s in SETTINGS)
    print(f"{'preset':<16}{head}{'always/never':>14}{'never/off':>11}")
    for name, preset in PRESETS.items():
        cs = {s: collector(preset, s) for s in SETTINGS}
        for c in cs.values():  # warm-up: auto-free steps, caches, the first allocations
            c.collect()
        best = dict.fromkeys(SETTINGS, 0.0)
        for _ in range(args.repeats):
            for s, c in cs.items():
                best[s] = max(best[s], timed(c, args.batches))
        cells = "".join(f"{best[s]:>12,.0f}" for s in SETTINGS)
        full, finite = best["always"] / best["never"], best["never"] / best["off"]
        print(f"{name:<16}{cells}{full:>14.2f}{finite:>11.2f}")
        for c in cs.values():
            c.close()


if __name__ == "__main__":
    main()
