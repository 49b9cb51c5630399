"""User-facing errors: one line that names the problem and the fix."""

from __future__ import annotations

import logging
import re


class UserError(Exception):
    """Bad input from the user (config, CLI, files): printed as one line, exit status 2."""


class ConfigError(UserError, ValueError):
    """A config value that is impossible or unsupported."""


# exit codes of the rltool commands; docs/reference/exit-codes.md lists every case
EXIT_OK = 0
EXIT_JOB_FAILED = 1  # rltool train -m: a job of the sweep failed
EXIT_USAGE = 2  # bad input (a UserError, a Hydra / OmegaConf composition error): one line
EXIT_DIVERGED = 3  # too many non-finite optimizer steps in a row
EXIT_ENV = 4  # the user's env failed (raised, NaN / inf, off its space): an EnvError, one line
EXIT_OS = 5  # the OS refused a write (disk full, quota, permission, read-only): an OSFault
EXIT_SOFTWARE = 70  # an internal error: a bug in rltool (sysexits EX_SOFTWARE)
EXIT_PREEMPTED = 75  # SIGTERM / SIGINT: checkpoint written, resume it (sysexits EX_TEMPFAIL)
EXIT_PEER_LOST = 76  # a distributed run lost a rank (died, hung): resume it (EX_PROTOCOL)
EXIT_INTERRUPTED = 130  # Ctrl-C outside a training session's handler (128 + SIGINT)


class RunStopped(Exception):
    """The run stopped on purpose before its budget: the CLI prints the message (one line) and
    exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message, exit_code)
        self.exit_code = exit_code

    def __str__(self) -> str:  # the message alone (args holds the code too, so that it pickles)
        return str(self.args[0])


class EnvError(Exception):
    """A fault of the user's env (not of rltool, not of the config): its ``reset`` / ``step``
    raised, or returned NaN / inf or a value off its declared space. One line naming the env, the
    vector index, the step and what was wrong; the original exception is the ``__cause__``. The
    CLI prints it and exits with ``exit_code`` (EXIT_ENV)."""

    exit_code = EXIT_ENV


class OSFault(Exception):
    """The OS refused to write the run folder (no space, over quota, no permission, a read-only
    file system): not rltool's fault nor the config's. One line naming the path and the fix (made
    by :func:`rltool.runfolder.writes.os_fault`); the OSError is the ``__cause__``. Exit
    ``EXIT_OS``."""

    exit_code = EXIT_OS


_log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # the once-lines said so far (warnings and notes)


def _first(line: str) -> bool:
    """True the first time this process asks about ``line``: no repeats from a loop."""
    if line in _WARNED:
        return False
    _WARNED.add(line)
    return True


def warn(message: str) -> None:
    """A WARNING in rltool's voice (``rltool: warning: ...``), once per message per process: no
    Python source line, no repeats from a loop (the commands show it on stderr)."""
    if _first(line := f"rltool: warning: {message}"):
        _log.warning(line)


def note(message: str) -> None:
    """An INFO line in rltool's voice (``rltool: ...``), once per message per process (the
    commands show it on stderr)."""
    if _first(line := f"rltool: {message}"):
        _log.info(line)


def one_line(exc: BaseException) -> str:
    """A one-line message for any exception raised while composing or running a config."""
    if isinstance(exc, UserError | OSFault):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = str(exc)
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, name = missing.groups()
        opts = re.search(r"Available options in '[^']+':\s*\n((?:[ \t]+\S+\n?)+)", text)
        names = [n for n in opts.group(1).split() if not n.startswith("base_")] if opts else []
        names = ", ".join(names) or "see rltool train --help"
        hint = " (joblib, submitit: pip install 'rltool[sweep]')" if "launcher" in group else ""
        return f"unknown option {group}={name}: choose one of {names}{hint}"
    not_struct = re.search(r"Key '([^']+)' is not in struct", text)
    if not_struct:
        return _unknown_key(_full_key(text) or not_struct.group(1))
    not_in = re.search(r"Key '([^']+)' not in '([^']+)'", text)
    if not_in:
        return _unknown_key(_full_key(text) or not_in.group(1))
    conv = re.search(r"Value '([^']*)' (?:of type '[^']+' )?could not be converted to (\w+)", text)
    if conv:
        key = _full_key(text) or "a key"
        kind = conv.group(2).lower()
        article = "an" if kind[0] in "aeiou" else "a"
        return f"{key}={conv.group(1)!r} is invalid: expected {article} {kind}"
    cause = exc.__cause__
    if cause is not None and cause is not exc:
        return one_line(cause)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"{type(exc).__name__}: {first}"


# keys that moved: old dotted key -> its new place (filled by the config layer that moved them,
# e.g. rltool/memories.py), so that an old command line is told where the key went
MOVED_KEYS: dict[str, str] = {}


def _unknown_key(key: str) -> str:
    fix = f"it moved to {MOVED_KEYS[key]}" if key in MOVED_KEYS else "check the spelling"
    return f"unknown config key '{key}': {fix} (rltool train --cfg job lists every key)"


def _full_key(text: str) -> str | None:
    m = re.search(r"full_key: (\S+)", text) or re.search(r"Could not override '([^']+)'", text)
    return m.group(1) if m else None
