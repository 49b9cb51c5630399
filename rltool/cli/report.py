"""``rltool report <dirs...> [--format table|markdown|csv]``: one row per setting of the runs found
in run or sweep folders (see :mod:`rltool.results`)."""

from __future__ import annotations

import sys

from rltool.cli import ArgParser
from rltool.results import find_runs, format_table, group_runs, rows


def warn_unreadable(cmd: str, unreadable) -> None:
    """One line each on stderr: a folder that is not a readable run, never a row."""
    for path, why in unreadable:
        print(f"rltool {cmd}: {path}: unreadable, left out: {why}", file=sys.stderr)


def report_main(argv: list[str]) -> int:
    p = ArgParser(prog="rltool report", description="Table of run / sweep folders.")
    p.add_argument("dirs", nargs="+")
    p.add_argument("--format", choices=("table", "markdown", "csv"), default="table")
    a = p.parse_args(argv)
    unreadable = []
    try:
        runs = find_runs(a.dirs, unreadable)
    finally:
        warn_unreadable("report", unreadable)
    print(format_table(rows(group_runs(runs)), a.format))
    return 0
