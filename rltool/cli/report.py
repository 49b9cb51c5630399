"""``rltool report <folders...> [by=[k,...]] [goal=G] [format=table|markdown|csv]``: one row per
setting of the runs found in run or sweep folders (see :mod:`rltool.analysis.results`): the frame
budget,
the final evaluations over seeds (mean, min, 10th percentile, median, max), how many seeds reach
the goal, and the mean over seeds of each seed's best periodic evaluation ("best greedy eval":
the best of greedy evaluations along the way, not the final policy's, and not POPGym's MMER).
POPGym settings get an aggregate row per policy, MiniGrid's a success column
(:mod:`rltool.analysis.tables`)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from rltool.analysis import stats
from rltool.analysis.results import find_runs, group_runs, mixed
from rltool.analysis.stats_report import add_intervals, compare, normalised_rows
from rltool.analysis.tables import _fmt, format_table, grid, rows
from rltool.cli.args import help_text, parse, wants_help
from rltool.errors import UserError
from rltool.sweeps.tune.study import is_study

_log = logging.getLogger(__name__)


def warn_unreadable(cmd: str, unreadable) -> None:
    """One line each on stderr: a folder that is not a readable run, never a row."""
    for path, why in unreadable:
        _log.warning(f"rltool {cmd}: {path}: unreadable, left out: {why}")


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
    stats: bool = field(
        default=False,
        metadata={
            "help": "add the IQM and the mean of the final evals over seeds with 95% stratified "
            "bootstrap intervals (>= 3 seeds), frames to goal= (a seed that never reaches it "
            "counts as the budget), and rows over the tasks' normalised scores (POPGym 0.5 x + "
            "0.5, MiniGrid's success rate); off by default: it needs rltool[stats] and takes a "
            "few seconds"
        },
    )
    compare: list[str] | None = field(
        default=None,
        metadata={
            "help": "compare=[A,B]: the probability that setting A improves on B, per task and "
            "over the tasks; A and B are values of the by= keys other than the task (env, task, "
            "env.* but env.num_envs and other run settings): compare=[gru,mlp], or key:value "
            "parts joined by '/', compare=[policy:gru,policy:mlp] (quoted, also key=value: "
            "compare=['policy=gru','policy=mlp'])"
        },
    )
    reps: int = field(
        default=2000,
        metadata={
            "help": "bootstrap resamples of each interval (seeded: the same "
            "folders print the same numbers)"
        },
    )

    def __post_init__(self):
        if not self.folders:
            raise UserError("rltool report needs a folder: rltool report <folder> ... [key=value]")
        if self.compare is not None and len(self.compare) != 2:
            raise UserError(
                f"compare={self.compare} names {len(self.compare)} setting(s): give two, "
                "compare=[A,B] (e.g. compare=[gru,mlp])"
            )
        if self.reps < 100:
            raise UserError(f"reps={self.reps} is too few for a 95% interval: give >= 100")


USAGE = "rltool report <folder> [<folder> ...] [key=value ...]"
ABOUT = "One table of the runs in run, sweep or study folders: a row per setting, over seeds."


def report_main(argv: list[str]) -> int:
    if wants_help(argv):
        print(help_text(ReportArgs, USAGE, ABOUT))
        return 0
    a = parse(ReportArgs, argv, "report")
    if len(a.folders) == 1 and is_study(a.folders[0]):  # rltool tune's study folder: its trials
        from rltool.sweeps.tune import results

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
    table, notes = rows(settings, a.goal), []
    if a.stats:
        notes += add_intervals(settings, table, a.goal, a.reps, stats.SEED)
        extra, more = normalised_rows(settings, a.goal, a.reps, stats.SEED)
        table += extra
        notes += more
    versus = compare(settings, *a.compare, a.reps, stats.SEED) if a.compare else None
    print(format_table(table, a.format))
    if versus:
        print("\n" + format_compare(*a.compare, versus[0], a.format))
        notes += versus[1]
    for note in notes:
        _log.info(f"rltool report: {note}")
    warn_mixed("report", settings)
    return 0


def format_compare(a: str, b: str, table: list[dict], fmt: str) -> str:
    """P(A > B) per task, then over the tasks."""
    if fmt == "csv":
        head = ",".join(table[0])
        return "\n".join([head] + [",".join(str(v) for v in r.values()) for r in table])
    head = ["task", f"P({a} > {b})", "95% CI", "seeds A/B", "frames"]
    body = [
        [
            r["task"],
            _fmt(r["p"], ".2f"),
            "-" if math.isnan(r["p_lo"]) else f"[{r['p_lo']:.2f}, {r['p_hi']:.2f}]",
            f"{r['seeds_a']}/{r['seeds_b']}",
            _fmt(r["frames"], ",.0f"),
        ]
        for r in table
    ]
    return grid(head, body, fmt)


def warn_mixed(cmd: str, settings) -> None:
    """One line each on stderr: a setting whose runs are of several envs (one row, many tasks)."""
    for name, ids in mixed(settings):
        _log.warning(
            f"rltool {cmd}: warning: {name!r} mixes runs of {len(ids)} env.id values "
            f"({', '.join(ids)}): add task or env.id to by="
        )
