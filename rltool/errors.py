"""User-facing errors: one line that names the problem and the fix."""

from __future__ import annotations

import re


class UserError(Exception):
    """Bad input from the user (config, CLI, files): printed as one line, exit status 2."""


class ConfigError(UserError, ValueError):
    """A config value that is impossible or unsupported."""


def one_line(exc: BaseException) -> str:
    """A one-line message for any exception raised while composing or running a config."""
    if isinstance(exc, UserError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = str(exc)
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, name = missing.groups()
        opts = re.search(r"Available options in '[^']+':\s*(.*?)(?:Config search|$)", text, re.S)
        found = [n for n in opts.group(1).split() if not n.startswith("base_")] if opts else []
        names = ", ".join(found) or "see rltool train --help"
        hint = " (joblib, submitit: pip install 'rltool[sweep]')" if "launcher" in group else ""
        return f"unknown option {group}={name}: choose one of {names}{hint}"
    not_struct = re.search(r"Key '([^']+)' is not in struct", text)
    if not_struct:
        return (
            f"unknown config key '{_full_key(text) or not_struct.group(1)}': check the spelling"
            " (rltool train --cfg job lists every key)"
        )
    conv = re.search(r"Value '([^']*)' (?:of type '[^']+' )?could not be converted to (\w+)", text)
    if conv:
        key = _full_key(text) or "a key"
        return f"{key}={conv.group(1)!r} is invalid: expected a {conv.group(2).lower()}"
    cause = exc.__cause__
    if cause is not None and cause is not exc:
        return one_line(cause)
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return f"{type(exc).__name__}: {first}"


def _full_key(text: str) -> str | None:
    m = re.search(r"full_key: (\S+)", text) or re.search(r"Could not override '([^']+)'", text)
    return m.group(1) if m else None
