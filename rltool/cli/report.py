"""``rltool report <folders...> [by=[k,...]] [goal=G] [format=table|markdown|csv]``: one row per
setting of the runs found in run or sweep folders (see :mod:`rltool.results`): the frame budget,
the final evaluations over seeds (mean, min, 10th percentile, median, max), how many seeds reach
the goal, and the mean over seeds of each seed's best periodic evaluation ("best greedy eval":
the best of greedy evaluations along the way, not the final policy's, and not POPGym's MMER).
POPGym settings get an aggregate row per policy, MiniGrid's a success column
(:mod:`rltool.tables`)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from rltool.cli.args import help_text, parse, wants_help
from rltool.errors import UserError
from rltool.results import find_runs, group_runs, mixed
from rltool.tables import format_table, rows
from rltool.tune.study import is_study


def warn_unreadable(cmd: str, unreadable) -> None:
    """One line each on stderr: a folder that is not a readable run, never a row."""
    for path, why in unreadable:
        print(f"rltool {cmd}: {path}: unreadable, left out: {why}", file=sys.stderr)


FOLDERS_HELP = "run or sweep folders (every argument without '='; a name with '=': ./<name>)"
BY_HELP = (
    "group by these keys, by=[env,policy] or by=env,policy: config groups take the option each "
    "run chose, other keys (loss.gamma) their value"
)


@dataclass
class ReportArgs:
    """rltool report's options (``key=value``, parsed by :mod:`rltool.cli.args`)."""

    folders: list[str] = field(
        default_factory=list, metadata={"help": FOLDERS_HELP, "positional": True}
    )
    by: list[str] | None = field(
        default=None, metadata={"help": BY_HELP + " (null: the overrides minus seed)"}
    )
    goal: float | None = field(
        default=None, metadata={"help": "count the seeds whose final eval is >= this"}
    )
    format: str = field(
        default="table",
        metadata={"help": "the table's format", "choices": ("table", "markdown", "csv")},
    )

    def __post_init__(self):
        if not self.folders:
            raise UserError("rltool report needs a folder: rltool report <folder> ... [key=value]")


USAGE = "rltool report <folder> [<folder> ...] [key=value ...]"
ABOUT = "One table of the runs in run, sweep or study folders: a row per setting, over seeds."


def report_main(argv: list[str]) -> int:
    if wants_help(argv):
        print(help_text(ReportArgs, USAGE, ABOUT))
        return 0
    a = parse(ReportArgs, argv, "report")
    if len(a.folders) == 1 and is_study(a.folders[0]):  # rltool tune's study folder: its trials
        from rltool.tune import results

        meta = results.st.load_meta(a.folders[0])
        table = results.ranked(results.load(a.folders[0]))
        print(results.format_trials(table, meta["objective"], a.format))
        return 0
    unreadable = []
    try:
        runs = find_runs(a.folders, unreadable)
    finally:
        warn_unreadable("report", unreadable)
    settings = group_runs(runs, a.by or None)
    print(format_table(rows(settings, a.goal), a.format))
    warn_mixed("report", settings)
    return 0


def warn_mixed(cmd: str, settings) -> None:
    """One line each on stderr: a setting whose runs are of several envs (one row, many tasks)."""
    for name, ids in mixed(settings):
        print(
            f"rltool {cmd}: warning: {name!r} mixes runs of {len(ids)} env.id values "
            f"({', '.join(ids)}): add task or env.id to by=",
            file=sys.stderr,
        )
