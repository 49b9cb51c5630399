"""``rltool report <dirs...> [--by KEYS] [--goal G] [--format table|markdown|csv]``: one row per
setting of the runs found in run or sweep folders (see :mod:`rltool.results`): the frame budget,
the final evaluations over seeds (mean, min, 10th percentile, median, max), how many seeds reach
the goal, and the mean over seeds of each seed's best periodic evaluation ("best greedy eval":
the best of greedy evaluations along the way, not the final policy's, and not POPGym's MMER).
POPGym settings get an aggregate row per policy, MiniGrid's a success column
(:mod:`rltool.tables`)."""

from __future__ import annotations

import sys

from rltool.cli import ArgParser
from rltool.results import find_runs, group_runs, mixed
from rltool.tables import format_table, rows
from rltool.tune.study import is_study


def warn_unreadable(cmd: str, unreadable) -> None:
    """One line each on stderr: a folder that is not a readable run, never a row."""
    for path, why in unreadable:
        print(f"rltool {cmd}: {path}: unreadable, left out: {why}", file=sys.stderr)


def report_main(argv: list[str]) -> int:
    p = ArgParser(prog="rltool report", description="Table of run / sweep folders.")
    p.add_argument("dirs", nargs="+", help="run or sweep folders, read into one table")
    p.add_argument(
        "--by",
        help="group by these keys, comma-separated: config groups (env,policy) take the option "
        "each run chose, other keys (loss.gamma) their value; default: the overrides minus seed",
    )
    p.add_argument("--goal", type=float, help="count the seeds whose final eval is >= this")
    p.add_argument("--format", choices=("table", "markdown", "csv"), default="table")
    a = p.parse_args(argv)
    if len(a.dirs) == 1 and is_study(a.dirs[0]):  # rltool tune's study folder: its trials
        from rltool.tune import results

        meta = results.st.load_meta(a.dirs[0])
        table = results.ranked(results.load(a.dirs[0]))
        print(results.format_trials(table, meta["objective"], a.format))
        return 0
    unreadable = []
    try:
        runs = find_runs(a.dirs, unreadable)
    finally:
        warn_unreadable("report", unreadable)
    by = [k.strip() for k in a.by.split(",") if k.strip()] if a.by else None
    settings = group_runs(runs, by)
    print(format_table(rows(settings, a.goal), a.format))
    warn_mixed("report", settings)
    return 0


def warn_mixed(cmd: str, settings) -> None:
    """One line each on stderr: a setting whose runs are of several envs (one row, many tasks)."""
    for name, ids in mixed(settings):
        print(
            f"rltool {cmd}: warning: {name!r} mixes runs of {len(ids)} env.id values "
            f"({', '.join(ids)}): add task or env.id to --by",
            file=sys.stderr,
        )
