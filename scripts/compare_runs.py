"""Same seeded runs, same metrics: runs a fixed set of short trainings with one checkout and diffs
their ``metrics.csv`` rows (time columns aside) against another set.

    python scripts/compare_runs.py run OUT [--repo PATH]   # the cases, with the code at PATH
    python scripts/compare_runs.py diff A B                # row by row; exit 1 on any difference

Besides the trainings, the LSTM run is exported (``rltool export``, both formats) and the exported
modules and ``rltool.load_policy`` are stepped on one fixed sequence of observations (a reset in
the middle): their actions and states are rows of ``steps.csv``, compared like the metrics rows.
The steps use the public surface only (``rltool.load_policy``, ``python -m rltool``), so that a
checkout whose modules moved runs the same cases.

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
# the LSTM run exported in each format, then stepped beside load_policy (``steps`` below)
EXPORTED = ("ppo_lstm_exported", "ppo_lstm_pomdp", ("pt2", "onnx"))
STEPS, RESET_AT = 40, 20  # observations stepped; the state restarts at this one
TIME_COLUMNS = ("time", "fps")
ROW_FILES = ("metrics.csv", "steps.csv")  # what a case folder holds to compare


def python(repo: Path, args: list[str], **env: str) -> int:
    """``python args`` with the code at ``repo``; its stdout dropped, its exit code returned."""
    env = {**os.environ, "PYTHONPATH": str(repo), "WANDB_MODE": "disabled", **env}
    cmd = [sys.executable, *args]
    return subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.DEVNULL).returncode


def rltool(repo: Path, args: list[str], **env: str) -> int:
    return python(repo, ["-m", "rltool", "train", *args, "logger.progress=none"], **env)


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
    run_exported(out, repo)


def run_exported(out: Path, repo: Path) -> None:
    name, source, formats = EXPORTED
    print(f"{name}: {source} exported ({', '.join(formats)}), stepped beside load_policy")
    (out / name).mkdir(parents=True, exist_ok=True)
    files = [out / name / f"policy.{f}" for f in formats]
    for f, file in zip(formats, files, strict=True):
        if python(
            repo, ["-m", "rltool", "export", f"run={out / source}", f"format={f}", f"out={file}"]
        ):
            raise SystemExit(f"{name}: rltool export format={f} failed")
    if python(
        repo,
        [
            str(Path(__file__).resolve()),
            "steps",
            str(out / source),
            str(out / name / "steps.csv"),
            *map(str, files),
        ],
    ):
        raise SystemExit(f"{name}: the exported steps did not match load_policy's")


def observations():
    """The fixed observations stepped: CartPole's four numbers, seeded, over their usual range."""
    import numpy as np

    scale = np.array([1.0, 1.0, 0.1, 1.0], np.float32)
    return np.random.default_rng(0).uniform(-1, 1, (STEPS, 4)).astype(np.float32) * scale


def exported_step(file: Path):
    """The exported file as ``run(feed) -> outputs``, dicts of numpy arrays keyed by its names."""
    if file.suffix == ".onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(file), providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return lambda feed: dict(zip(names, session.run(None, feed), strict=True))
    import torch

    module = torch.export.load(str(file)).module()

    def run(feed):
        with torch.no_grad():
            out = module({k: torch.from_numpy(v) for k, v in feed.items()})
        return {k: v.numpy() for k, v in out.items()}

    return run


def play(step, state0: dict) -> list[list]:
    """``step(obs, state, first) -> (action, state)`` over the fixed observations, the state
    restarting at the first and at ``RESET_AT``: rows of (step, output, its values)."""
    import numpy as np

    rows, state = [], state0
    for i, obs in enumerate(observations()):
        action, state = step(obs, state, i in (0, RESET_AT))
        for k, v in {"action": action, **state}.items():
            rows.append([i, k, " ".join(map(str, np.ravel(np.asarray(v)).tolist()))])
    return rows


def steps(run: Path, out: Path, files: list[Path]) -> int:
    """Steps ``load_policy`` and each exported file on the fixed observations and writes their
    actions and states to ``out`` (``steps.csv``); exit 1 where an export's action differs from
    ``load_policy``'s or a state by more than 1e-5 (tests/test_export.py's bound)."""
    import numpy as np

    import rltool

    policy, _ = rltool.load_policy(run)
    zeros = {k: v.numpy() for k, v in policy.initial_state(1).items()}
    fresh = policy.initial_state
    sources = {"load_policy": play(lambda o, s, first: policy(o, fresh(1) if first else s), zeros)}
    for file in files:
        run_file = exported_step(file)

        def step(obs, state, first, run_file=run_file):
            feed = {"observation": obs[None], "is_init": np.full((1, 1), first), **state}
            got = run_file(feed)
            return got["action"][0], {k: got[f"next_{k}"] for k in state}

        sources[file.suffix[1:]] = play(step, zeros)
    mine = sources["load_policy"]
    bad = sum(not agrees(name, got, mine) for name, got in sources.items() if got is not mine)
    with out.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["source", "step", "output", "values"])
        w.writerows([name, *r] for name, got in sources.items() for r in got)
    return 1 if bad else 0


def agrees(name: str, got: list[list], mine: list[list]) -> bool:
    """Whether an exported file's rows give ``load_policy``'s actions (``mine``), and its states
    within 1e-5; prints the largest gap."""
    pairs = list(zip(got, mine, strict=True))
    same = all(r[1] != "action" or r == m for r, m in pairs)
    gap = max(
        abs(float(x) - float(y))
        for r, m in pairs
        for x, y in zip(r[2].split(), m[2].split(), strict=True)
    )
    print(
        f"  {name}: actions {'agree' if same else 'DIFFER'}, largest gap {gap:.1e}", file=sys.stderr
    )
    return same and gap <= 1e-5


def rows(run: Path) -> list[dict[str, str]]:
    """The rows of a case's ``metrics.csv`` (or ``steps.csv``), without the columns that measure
    time."""
    file = next(run / n for n in ROW_FILES if (run / n).exists())
    with file.open(newline="") as f:
        return [
            {k: v for k, v in r.items() if not k.startswith(TIME_COLUMNS)}
            for r in csv.DictReader(f)
        ]


def diff(a: Path, b: Path) -> int:
    names = sorted(p.name for p in a.iterdir() if any((p / n).exists() for n in ROW_FILES))
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
    s = sub.add_parser("steps", help="(run calls it) load_policy beside exported files")
    s.add_argument("run", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("files", type=Path, nargs="+")
    args = p.parse_args()
    if args.cmd == "run":
        run_cases(args.out.resolve(), args.repo.resolve())
        return 0
    if args.cmd == "steps":
        return steps(args.run, args.out, args.files)
    return diff(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
