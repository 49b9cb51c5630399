"""``rltool``: a small dispatcher over subcommands, one module each in this package.

Hydra has no subcommands: we pop the subcommand and call it with the rest of the arguments.
Only ``train`` is a Hydra app (:mod:`rltool.cli.train`, with ``-m`` sweeps and ``--cfg``);
``eval`` parses its own ``key=value`` arguments (:mod:`rltool.cli.eval`) and ``report`` /
``plot`` use argparse (:mod:`rltool.cli.report`, :mod:`rltool.cli.plot`). A command's module is
imported only when it runs. The dispatcher owns error printing: any failure in composing or
validating the config prints one line and exits with status 2; ``--debug`` (or
``HYDRA_FULL_ERROR=1``) shows the full traceback.
"""

from __future__ import annotations

import argparse
import os
import sys

from rltool.errors import RunStopped, UserError, one_line


def _lazy(module: str, func: str):
    def run(argv: list[str]) -> int:
        import importlib

        return getattr(importlib.import_module(module), func)(argv)

    return run


COMMANDS = {
    "train": (
        _lazy("rltool.cli.train", "train_cmd"),
        "train an agent (Hydra overrides: env=..., policy=..., ...; -m: sweep)",
    ),
    "eval": (_lazy("rltool.cli.eval", "main"), "evaluate a run: run=<dir> episodes=N video=true"),
    "report": (
        _lazy("rltool.cli.report", "report_main"),
        "table of runs/sweeps: <dirs...> [--format]",
    ),
    "plot": (_lazy("rltool.cli.plot", "plot_main"), "learning curves of runs/sweeps -> PNG"),
}

USAGE = (
    "usage: rltool <command> [overrides ...] [--debug]\n\ncommands:\n"
    + "".join(f"  {name:<8} {help_}\n" for name, (_, help_) in COMMANDS.items())
    + "\nrltool <command> --help shows a command's config groups and options."
)


class ArgParser(argparse.ArgumentParser):
    """argparse for the commands that use it: a usage error is a one-line UserError (exit 2
    through the dispatcher), not argparse's usage block and its own exit."""

    def error(self, message):
        raise UserError(message)


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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get("HYDRA_FULL_ERROR") == "1"
    argv = [a for a in argv if a != "--debug"]
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(
            f"rltool: error: unknown command {name!r}: choose one of "
            f"{', '.join(COMMANDS)} (rltool --help)",
            file=sys.stderr,
        )
        return 2
    env_before = {k: os.environ.get(k) for k in ("HYDRA_FULL_ERROR", "RLTOOL_DEBUG")}
    if debug:
        os.environ["RLTOOL_DEBUG"] = "1"  # multirun jobs print their tracebacks too
    os.environ["HYDRA_FULL_ERROR"] = "1"  # Hydra raises instead of printing; we print one line
    stderr, sys.stderr = sys.stderr, _QuietStderr(sys.stderr)
    try:
        sys.argv = [f"rltool-{name}", *rest]
        rc = COMMANDS[name][0](rest)
    except RunStopped as e:  # on purpose: a signal (checkpoint written) or divergence
        print(f"rltool {name}: {e}", file=stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"rltool {name}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - every failure becomes one line unless --debug
        if debug:
            raise
        print(f"rltool {name}: error: {one_line(e)}", file=stderr)
        return 2
    finally:
        sys.stderr = stderr
        for k, v in env_before.items():  # main() may run again in this process (tests, API)
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
