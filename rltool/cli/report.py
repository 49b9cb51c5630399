"""``rltool report <dirs...> [--format table|markdown|csv]``: one row per setting of the runs found
in run or sweep folders (see :mod:`rltool.results`)."""

from __future__ import annotations

from rltool.cli import ArgParser
from rltool.results import find_runs, format_table, group_runs, rows


def report_main(argv: list[str]) -> int:
    p = ArgParser(prog="rltool report", description="Table of run / sweep folders.")
    p.add_argument("dirs", nargs="+")
    p.add_argument("--format", choices=("table", "markdown", "csv"), default="table")
    a = p.parse_args(argv)
    print(format_table(rows(group_runs(find_runs(a.dirs))), a.format))
    return 0
