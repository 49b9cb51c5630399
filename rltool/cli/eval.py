"""``rltool eval run=<dir> [episodes=10] [video=true] ...``: evaluate a trained run.

Loads the latest checkpoint (or ``checkpoint=<name>``; ``checkpoint=best``: the policy of the
best evaluation during training) safely, runs the evaluation protocol of
:mod:`rltool.run.evaluation` (exploit, sequential recurrent state, frozen normalisation), prints the
return and length statistics and writes them, with every episode, to ``<run>/eval.json``.
``video=true`` records episodes of the first env with gymnasium's RecordVideo (rgb_array envs;
needs moviepy and, for the classic-control envs, pygame: ``pip install 'rltool[video]'``).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path

from rltool.cli.args import help_text, parse, wants_help
from rltool.console import STDOUT
from rltool.errors import OSFault, UserError
from rltool.runfolder.layout import RunFolder
from rltool.runfolder.writes import check_writable, write_text

_log = logging.getLogger(__name__)


def _opt(default, help_: str, **more):
    return field(default=default, metadata={"help": help_, **more})


@dataclass
class EvalArgs:
    """rltool eval's options (``key=value``, parsed by :mod:`rltool.cli.args`)."""

    run: str = _opt(
        "", "the run folder to evaluate, e.g. run=outputs/2026-12-02/10-11-12", required=True
    )
    checkpoint: str | None = _opt(
        None, "best, or a checkpoint of <run>/checkpoints by name or frames (null: the latest)"
    )
    episodes: int = _opt(10, "episodes to play")
    num_envs: int | None = _opt(None, "envs played at once (null: min(episodes, 8))")
    seed: int | None = _opt(
        None, "the eval envs' seed (null: the run's seed + eval.seed_offset, as in training)"
    )
    max_steps: int = _opt(100_000, "at most this many vector steps, against endless episodes")
    video: bool = _opt(False, "record episodes of the first env into <run>/videos/ (rltool[video])")
    video_episodes: int = _opt(1, "episodes recorded when video=true")
    out: str | None = _opt(None, "where the result goes (null: <run>/eval.json)")
    num_threads: int | None = _opt(None, "torch threads (null: the run's num_threads)")

    def __post_init__(self):
        if not self.run:
            raise UserError(
                "rltool eval needs run=<run folder>, e.g. run=outputs/2026-12-02/10-11-12"
            )
        for name in ("episodes", "max_steps", "video_episodes"):
            if getattr(self, name) < 1:
                raise UserError(f"{name}={getattr(self, name)} is invalid: must be >= 1")
        for name in ("num_envs", "num_threads"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise UserError(f"{name}={getattr(self, name)} is invalid: must be >= 1")


def parse_args(argv: list[str]) -> EvalArgs:
    """``key=value`` arguments, like ``rltool train``'s overrides."""
    return parse(EvalArgs, argv, "eval")


def _set_threads(args: EvalArgs) -> None:
    """torch's intra-op threads: ``num_threads=``, or the run's (as in training: an eval with
    torch's default of one thread per core runs several times slower on small models)."""
    import torch

    from rltool.config.saved import read_saved

    n = args.num_threads
    if n is None:
        try:
            n = read_saved(RunFolder(args.run).config).get("num_threads")
        except Exception:  # noqa: BLE001 - no readable config: restore() names the problem
            n = None
    torch.set_num_threads(n if isinstance(n, int) and n >= 1 else 1)


def evaluate_run(args: EvalArgs) -> dict:
    """Runs the evaluation (:func:`rltool.api.evaluate`); returns what eval.json holds."""
    _set_threads(args)  # before anything runs
    from rltool.api import evaluate

    return evaluate(
        args.run,
        episodes=args.episodes,
        checkpoint=args.checkpoint,
        seed=args.seed,
        num_envs=args.num_envs,
        max_steps=args.max_steps,
        video_episodes=args.video_episodes if args.video else 0,
    )


def _writes(out: Path, write, default: bool = False) -> None:
    """``write()``; the OS refusing it is an OSFault (exit 5), any other failure to write
    ``out`` (a missing folder, a folder named so) a UserError. ``default``: ``out`` is the run's
    own eval.json, so the refusal also names ``out=``, which leaves the run folder alone."""
    try:
        write()
    except OSFault as e:
        if not default:
            raise
        raise OSFault(
            f"{e}; or write the results elsewhere: rltool eval run=... out=<writable file>"
        ) from e
    except OSError as e:
        raise UserError(f"out={out}: cannot write it ({e}): give a writable file") from None


USAGE = "rltool eval run=<run folder> [key=value ...]"
ABOUT = (
    "Plays greedy episodes of a trained run (the evaluation protocol of training), prints the "
    "return and length statistics and writes them to eval.json."
)


def main(argv: list[str]) -> int:
    if wants_help(argv):
        print(help_text(EvalArgs, USAGE, ABOUT))
        return 0
    a = parse_args(argv)
    out = Path(a.out) if a.out else RunFolder(a.run).eval
    if a.out or Path(a.run).is_dir():  # a missing run folder: evaluate_run names it
        _writes(out, lambda: check_writable(out), not a.out)  # before any episode is played
    result = evaluate_run(a)
    _writes(out, lambda: write_text(out, json.dumps(result, indent=2)), not a.out)
    if result["episodes"] < a.episodes:
        _log.warning(
            f"rltool eval: warning: only {result['episodes']} of {a.episodes} episodes ended "
            f"within max_steps={a.max_steps}",
            extra=STDOUT,
        )
    f = lambda x: "-" if not math.isfinite(x) else f"{x:.2f}"
    print(
        f"{a.run} ({result['checkpoint']}, {result['frames']:,} frames): "
        f"{result['episodes']} episodes\n"
        f"  return {f(result['return_mean'])} +- {f(result['return_std'])} "
        f"(min {f(result['return_min'])}, max {f(result['return_max'])})\n"
        f"  length {f(result['length_mean'])} +- {f(result['length_std'])} "
        f"(min {f(result['length_min'])}, max {f(result['length_max'])})\n"
        f"  written to {out}" + (f"; videos in {RunFolder(a.run).videos}" if a.video else "")
    )
    return 0
