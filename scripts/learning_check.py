"""CI's learning check: did the shipped defaults still learn the memory task?

Reads the ``summary.json`` of each run below the given sweep folder (``.ci/run`` trains masked
CartPole with the LSTM on seeds kept out of tuning), prints one row per run and PASS / FAIL:
PASS when at least ``--need`` runs end at ``--good`` or more and none below ``--floor``.

    python scripts/learning_check.py multirun/learning-check [--good 450 --floor 300 --need 2]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sweep_dir", type=Path)
    p.add_argument("--good", type=float, default=450.0)
    p.add_argument("--floor", type=float, default=300.0)
    p.add_argument("--need", type=int, default=2)
    p.add_argument("--runs", type=int, default=3, help="runs the sweep should hold")
    a = p.parse_args(argv)
    rows = []
    for status in sorted(a.sweep_dir.rglob("status.json")):
        run = status.parent
        st = json.loads(status.read_text())
        try:
            summary = json.loads((run / "summary.json").read_text())
        except (OSError, ValueError):
            summary = {}
        ret = summary.get("eval/return_mean")
        rows.append((run.name, " ".join(st.get("overrides", [])), st.get("status"), ret, summary))
    head = ("job", "overrides", "status", "final eval", "frames", "wall")
    print("{:<4} {:<45} {:<8} {:>10} {:>8} {:>7}".format(*head))
    for name, ov, status, ret, s in rows:
        r = "-" if ret is None else f"{ret:.1f}"
        wall = s.get("wall_time_s")
        w = "-" if wall is None else f"{wall:.0f} s"
        print(f"{name:<4} {ov:<45} {status or '-':<8} {r:>10} {s.get('frames', 0):>8,} {w:>7}")
    returns = [r[3] for r in rows if r[3] is not None]
    good = sum(r >= a.good for r in returns)
    low = [r for r in returns if r < a.floor]
    ok = len(returns) == a.runs == len(rows) and good >= a.need and not low
    print(
        f"{'PASS' if ok else 'FAIL'}: {good} of {len(rows)} runs ended >= {a.good:g} "
        f"(need {a.need}), {len(low)} below {a.floor:g}, {len(returns)} of {a.runs} finished"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
