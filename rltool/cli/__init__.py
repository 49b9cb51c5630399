"""``rltool``: a small dispatcher over subcommands, one module each in this package.

Hydra has no subcommands: we pop the subcommand and call it with the rest of the arguments.
Every command takes ``key=value`` arguments: ``train`` as a Hydra app (:mod:`rltool.cli.train`,
with ``-m`` sweeps and ``--cfg``); ``eval``, ``report``, ``plot`` and ``tune`` through one typed
parser (:mod:`rltool.cli.args`), ``tune`` running each trial through ``train``'s sweeps
(:mod:`rltool.cli.tune`). A command's module is imported only when it runs.

The dispatcher owns error printing and the exit status (:mod:`rltool.errors`): bad input (a
:class:`~rltool.errors.UserError`, or Hydra / OmegaConf refusing to compose the config) prints
one line and exits with 2; any other exception is a bug in rltool: one line that says so, exit
70. The user's env failing (an :class:`~rltool.errors.EnvError`) is one line and exit 4; the OS
refusing a write (disk full, no permission: an :class:`~rltool.errors.OSFault`, or such an
``OSError`` from anywhere) is one line with the path and the fix, exit 5. A run
stopped on purpose exits with its own code (3, 75), Ctrl-C with 130, a sweep with a failed job
with 1. ``--debug`` (or ``HYDRA_FULL_ERROR=1``) lets the exception through, with its
full traceback. The dispatcher leaves ``os.environ`` and ``sys.argv`` as they are: ``train`` runs
its Hydra app on its argument list, and gets ``--debug`` as an argument.
"""

from __future__ import annotations

import logging
import os
import sys

from rltool.console import cli_output
from rltool.errors import (
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_OS,
    EXIT_SOFTWARE,
    EXIT_USAGE,
    EnvError,
    OSFault,
    RunStopped,
    UserError,
    one_line,
)

_log = logging.getLogger(__name__)


def _lazy(module: str, func: str, takes_debug: bool = False):
    def run(argv: list[str], debug: bool) -> int:
        import importlib

        command = getattr(importlib.import_module(module), func)
        return command(argv, debug=debug) if takes_debug else command(argv)

    return run


COMMANDS = {
    "train": (
        _lazy("rltool.cli.train", "train_cmd", takes_debug=True),
        "train an agent: Hydra overrides env=<option> policy=<option> key=value ...; -m: sweep",
    ),
    "eval": (
        _lazy("rltool.cli.eval", "main"),
        "evaluate a run: run=<folder> [episodes=10] [checkpoint=best] [video=true] ...",
    ),
    "export": (
        _lazy("rltool.cli.export", "main"),
        "a run's policy as one ONNX / torch.export file: run=<folder> [format=onnx|pt2] ...",
    ),
    "report": (
        _lazy("rltool.cli.report", "report_main"),
        "table of runs/sweeps/studies: <folder> ... [by=[env,policy]] [goal=450] [format=csv]",
    ),
    "plot": (
        _lazy("rltool.cli.plot", "plot_main"),
        "learning curves -> PNG: <folder> ... [out=curves.png] [by=task] [curves=policy]",
    ),
    "tune": (
        _lazy("rltool.cli.tune", "tune_cmd"),
        "hyperparameter search: <train overrides> search=<space> trials=N [seeds=3] ...",
    ),
}

USAGE = (
    "usage: rltool <command> [key=value ...] [--debug]   |   rltool --version\n\ncommands:\n"
    + "".join(f"  {name:<8} {help_}\n" for name, (_, help_) in COMMANDS.items())
    + "\nrltool <command> --help lists its options (train: its config groups and keys)."
)


class _QuietStderr:
    """stderr without Hydra's "Error executing job with overrides" preamble: we print our own
    line."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        if text.startswith("Error executing job with overrides"):
            return len(text)
        return self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _bad_input(exc: Exception) -> bool:
    """A UserError (ConfigError included), or Hydra / OmegaConf refusing the config: an unknown
    option or key, a wrong type, an override that does not parse."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    return isinstance(exc, UserError | HydraException | OmegaConfBaseException)


def _internal_error(exc: Exception) -> str:
    text = str(exc).strip()
    what = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
    return f"internal error (a bug in rltool): {what}; rerun with --debug for the traceback"


def main(argv: list[str] | None = None) -> int:
    with cli_output():  # rltool's log lines on the terminal, as they always were
        rc = _main(argv)
    if os.environ.get("RLTOOL_LAUNCH_REPORT"):  # rank 0 of a run rltool launched: its status
        from rltool.distributed.launcher import report

        report(exit=rc)
    return rc


def _main(argv: list[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if argv[0] == "--version":
        from rltool import __version__

        print(f"rltool {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        _log.error(
            f"rltool: error: unknown command {name!r}: choose one of "
            f"{', '.join(COMMANDS)} (rltool --help)"
        )
        return EXIT_USAGE
    stderr, sys.stderr = sys.stderr, _QuietStderr(sys.stderr)
    try:
        rc = COMMANDS[name][0](rest, debug)
        sys.stdout.flush()  # a closed pipe (| head) shows here, not at exit
    except RunStopped as e:  # on purpose: a signal (checkpoint written) or divergence
        _log.warning(f"rltool {name}: {e}")
        return e.exit_code
    except KeyboardInterrupt:
        _log.warning(f"rltool {name}: interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # output piped into a reader that stopped (| head): not a failure
        _quiet_stdout()
        return EXIT_OK
    except (EnvError, OSFault) as e:  # the user's env or the OS, not rltool: their own status
        if debug:
            raise
        _log.error(f"rltool {name}: error: {e}")
        return e.exit_code
    except Exception as e:  # noqa: BLE001 - every failure becomes one line unless --debug
        if debug:
            raise
        if _bad_input(e):
            _log.error(f"rltool {name}: error: {one_line(e)}")
            return EXIT_USAGE
        from rltool.runfolder.writes import os_fault

        fault = os_fault(e)  # an OS refusal raised outside rltool's writers
        if fault is not None:
            _log.error(f"rltool {name}: error: {fault}")
            return EXIT_OS
        _log.error(f"rltool {name}: {_internal_error(e)}")
        return EXIT_SOFTWARE
    finally:
        sys.stderr = stderr
    return rc or 0


def _quiet_stdout() -> None:
    """Points stdout at /dev/null, so that flushing it at exit raises no second BrokenPipeError."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


if __name__ == "__main__":
    sys.exit(main())
