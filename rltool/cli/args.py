"""One argument convention for the commands other than ``train``: ``key=value``, typed.

A command declares its options as a dataclass, one field per option: its type, its default and
``field(metadata={"help": ...})`` (``"choices"``: the values allowed; ``"required"``: shown as
such in help, checked by the class; ``"positional"``: a ``list[str]`` field that takes every
argument without ``=``, the folders of ``report`` and ``plot``). :func:`parse` turns the
arguments into that dataclass; :func:`help_text` prints its options, the same layout for every
command; :func:`option_tables` gives every command's options to a docs generator.

Values are read with Hydra's override grammar, as ``rltool train`` reads its overrides:
``goal=450``, ``video=true``, ``out=null``, ``by=[env,policy]`` or ``by=env,policy``,
``title='a b'``. A string option takes its text as written whenever the grammar reads something
other than a string (a path with spaces, commas or non-ASCII letters, as a shell passes it), so
every path works unquoted. Bad input is one :class:`~rltool.errors.UserError` line naming the
key and the fix; the old ``--flag value`` spellings are refused with their new one.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import re
import textwrap
import types
import typing
from dataclasses import dataclass

from rltool.errors import UserError

# command -> the dataclass of its options ("module:class", imported when asked)
COMMANDS = {
    "eval": "rltool.cli.eval:EvalArgs",
    "export": "rltool.cli.export:ExportArgs",
    "report": "rltool.cli.report:ReportArgs",
    "plot": "rltool.cli.plot:PlotArgs",
    "tune": "rltool.cli.tune:Options",
}
_KEY = re.compile(r"[A-Za-z_]\w*")  # an option's name; anything else before '=' is a word
_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


@dataclass(frozen=True)
class Option:
    """One option of a command, as help and a CLI reference show it."""

    name: str
    type: str  # int, float, bool, str, list[str], list[int], or the choices: table|markdown|csv
    default: object  # None is null
    help: str
    required: bool = False
    positional: bool = False


def _unwrap(hint) -> tuple[object, bool]:
    """(the type without None, whether None is allowed)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(hint) if a is not type(None)]
        return rest[0], len(rest) < len(typing.get_args(hint))
    return hint, False


def _type_name(base, choices) -> str:
    if choices:
        return "|".join(map(str, choices))
    if typing.get_origin(base) is list:
        return f"list[{typing.get_args(base)[0].__name__}]"
    return base.__name__


def _default(f: dataclasses.Field) -> object:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def options(cls) -> list[Option]:
    """The options of a command's dataclass, in declaration order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        base, _ = _unwrap(hints[f.name])
        meta = f.metadata
        kind = _type_name(base, meta.get("choices"))
        out.append(
            Option(
                f.name,
                kind,
                _default(f),
                meta.get("help", ""),
                meta.get("required", False),
                meta.get("positional", False),
            )
        )
    return out


def options_class(command: str):
    module, name = COMMANDS[command].split(":")
    return getattr(importlib.import_module(module), name)


def option_tables() -> dict[str, list[Option]]:
    """Every command's options (name, type, default, help): what a CLI reference lists."""
    return {command: options(options_class(command)) for command in COMMANDS}


def show(value) -> str:
    """A default as it is typed: null, true, [a,b]."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(map(show, value)) + "]"
    return str(value) if value != "" else "''"


def wants_help(argv: list[str]) -> bool:
    return any(a in ("-h", "--help") for a in argv)


def help_text(cls, usage: str, about: str) -> str:
    """``usage``, ``about``, then one line per option: ``key=<type> (default: X)  help``."""
    rows = []
    for o in options(cls):
        if o.positional:
            head = f"<{o.name}> ..."
        else:
            head = f"{o.name}=<{o.type}> " + (
                "(required)" if o.required else f"(default: {show(o.default)})"
            )
        rows.append((head, o.help))
    width = max(len(h) for h, _ in rows)
    head = "options (key=value, read as rltool train reads its overrides):"
    lines = [f"usage: {usage}", "", textwrap.fill(about, 96), "", head]
    lines += [f"  {h:<{width}}  {text}" for h, text in rows]
    return "\n".join(lines)


def parse(cls, argv: list[str], command: str, keep_others: bool = False):
    """The command's options from ``argv``; the last value of a key given twice wins. With
    ``keep_others``: (the options, the arguments that are not theirs, in order)."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    words = next((n for n, f in fields.items() if f.metadata.get("positional")), None)
    values: dict[str, object] = {words: []} if words else {}
    others: list[str] = []
    for i, token in enumerate(argv):
        if token.startswith("-"):
            _refuse_flag(argv, i, fields, command)
        key, eq, text = token.partition("=")
        if eq and _KEY.fullmatch(key) and key in fields:
            value = convert(key, text, hints[key], fields[key].metadata.get("choices"))
            if key == words:  # folders=[a,b]: the same as the bare words
                values[key].extend(value or [])
            else:
                values[key] = value
        elif keep_others:
            others.append(token)
        elif eq and _KEY.fullmatch(key):
            raise UserError(_unknown(key, fields, words, command))
        elif words:
            values[words].append(token)
        else:
            raise UserError(
                f"{token!r} is not an option: rltool {command} takes key=value "
                f"(rltool {command} --help lists them)"
            )
    parsed = cls(**values)
    return (parsed, others) if keep_others else parsed


def _unknown(key: str, fields: dict, words: str | None, command: str) -> str:
    names = list(fields)
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]}=?)" if close else ""
    tail = "; a folder whose name holds '=' is written ./<name>" if words else ""
    return f"unknown option {key!r}{hint}: those of rltool {command} are {', '.join(names)}{tail}"


def _refuse_flag(argv: list[str], i: int, fields: dict, command: str) -> None:
    """A ``--flag``: the old spelling of an option (refused with its new one) or no option."""
    token = argv[i]
    name, eq, value = token.lstrip("-").partition("=")
    name = name.replace("-", "_")
    if name in fields and not fields[name].metadata.get("positional"):
        nxt = argv[i + 1] if i + 1 < len(argv) else ""
        if not eq and nxt and not nxt.startswith("-") and "=" not in nxt:
            value = nxt
        raise UserError(
            f"{token.split('=')[0]} is no longer a flag: write {name}={value or '<value>'} "
            f"(rltool {command} takes key=value options)"
        )
    raise UserError(
        f"{token!r} is not an option: rltool {command} takes key=value "
        f"(rltool {command} --help lists them)"
    )


def convert(key: str, text: str, hint, choices=None) -> object:
    """The value of ``key=text`` as the type ``hint`` (one of ``choices`` when given)."""
    base, nullable = _unwrap(hint)
    value = _string(text, nullable) if base is str else _typed(key, text, base, nullable)
    if choices and value is not None and value not in choices:
        raise UserError(f"{key}={text!r} is invalid: choose one of {', '.join(map(str, choices))}")
    return value


def _grammar(text: str):
    """The value Hydra's override grammar reads (a ValueError when it reads none)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        return OverridesParser.create().parse_overrides([f"key={text}"])[0].value()
    except HydraException as e:
        raise ValueError(str(e).strip().splitlines()[0]) from None


def _string(text: str, nullable: bool) -> str | None:
    try:
        value = _grammar(text)
    except ValueError:  # spaces, non-ASCII letters, '(': a path as the shell passed it
        return text.strip()
    if value is None and nullable:
        return None
    return value if isinstance(value, str) else text.strip()  # 450, a,b: as written


def _typed(key: str, text: str, base, nullable: bool) -> object:
    try:
        value = _grammar(text)
    except ValueError as e:
        raise UserError(f"{key}={text!r} does not parse ({e}): quote it, {key}='...'") from None
    if value is None:
        if nullable:
            return None
        raise UserError(f"{key}=null is invalid: expected {_word(base)} ({key}=<{_name(base)}>)")
    if typing.get_origin(base) is list:
        item = typing.get_args(base)[0]
        return [_scalar(key, text, v, item, base) for v in _items(key, text, value) if v != ""]
    return _scalar(key, text, value, base)


def _items(key: str, text: str, value) -> list:
    """A list, a comma-separated ``a,b`` (Hydra's choice sweep), ``range(a,b)`` or one item."""
    from hydra.core.override_parser.types import ChoiceSweep, RangeSweep

    if isinstance(value, list):
        return value
    if isinstance(value, ChoiceSweep):
        return list(value.list)
    if isinstance(value, RangeSweep) and all(
        isinstance(x, int) for x in (value.start, value.stop, value.step)
    ):
        return list(range(value.start, value.stop, value.step))
    if isinstance(value, dict) or hasattr(value, "tags"):  # another sweep, a mapping
        raise UserError(f"{key}={text!r} is invalid: expected a list, e.g. {key}=[a,b]")
    return [value]


def _scalar(key: str, text: str, value, kind, whole=None) -> object:
    """``value`` as ``kind`` (an item of a list of type ``whole``)."""
    if kind is str and isinstance(value, str | int | float):
        return str(value)  # a bool as a config writes it: [true,false] -> ["True", "False"]
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, kind) and (kind is bool or not isinstance(value, bool)):
        return value
    whole = whole or kind
    raise UserError(f"{key}={text!r} is invalid: expected {_word(whole)} ({key}=<{_name(whole)}>)")


def _word(kind) -> str:
    if typing.get_origin(kind) is list:
        return f"a list of {_word(typing.get_args(kind)[0]).split(' ', 1)[-1]}s, e.g. [a,b]"
    return _WORDS.get(kind, kind.__name__)


def _name(kind) -> str:
    return _type_name(kind, None)
