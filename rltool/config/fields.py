"""The valid values of a config key, declared as data beside its field, and the one checker.

A schema declares a key's simple check in the field itself: ``ranged(8, ge=1)``,
``ranged(None, ge=1, null=True)``, ``choice("sync", ("sync", "async"))``; the
:class:`Valid` it stores in the field's metadata is what :func:`check_fields` enforces (one
ConfigError line: ``<key>=<value> is invalid: <what is valid>``) and what :func:`valid_values`
lists for other code (the docs' "valid values" column, property tests). Rules across fields stay
code in the schema's ``__post_init__``, after :func:`check_fields`.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rltool.errors import ConfigError

META = "valid"  # the field-metadata key that holds a field's Valid


@dataclass(frozen=True)
class Valid:
    """What a key accepts: a range (bounds ``ge``/``gt``/``le``/``lt``, None: open; ``finite``:
    no NaN or inf) or one of ``choices``; ``null``: None too (a string: what None means);
    ``each``: the value is a list whose every entry must be valid; ``why``: said after what is
    valid (a reason, a fix)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    finite: bool = False
    choices: tuple[str, ...] | None = None
    null: bool | str = False
    each: bool = False
    why: str = ""

    def accepts(self, value: Any) -> bool:
        if value is None:
            return bool(self.null)
        if self.each:
            return all(self._accepts_one(v) for v in value)
        return self._accepts_one(value)

    def _accepts_one(self, v: Any) -> bool:
        if self.choices is not None:
            return v in self.choices
        if self.finite and not math.isfinite(v):
            return False
        return all(ok(v, b) for _, ok, b in self._bounds())

    def _bounds(self) -> list[tuple[str, Callable, float]]:
        """(sign, comparison, bound) of each bound given."""
        named = [(sign, ok, getattr(self, name)) for name, sign, ok in _OPS]
        return [(sign, ok, b) for sign, ok, b in named if b is not None]

    def text(self) -> str:
        """What is valid, as the end of a ConfigError line: ``must be in [0, 1]``,
        ``choose one of a, b``, ``must be >= 1 or null``."""
        if self.choices is not None:
            what = f"one of {', '.join(self.choices)}"
            what = f"each entry must be {what}" if self.each else f"choose {what}"
        else:
            what = f"{'each entry ' if self.each else ''}must be {self.bounds()}"
        if self.null:
            what += f" or null ({self.null})" if isinstance(self.null, str) else " or null"
        return f"{what} ({self.why})" if self.why else what

    def bounds(self) -> str:
        """The range alone: ``>= 1``, ``in (0, 1]``, ``< 4294967296``, ``finite``."""
        low = f"[{_num(self.ge)}" if self.ge is not None else None
        low = f"({_num(self.gt)}" if self.gt is not None else low
        high = f"{_num(self.le)}]" if self.le is not None else None
        high = f"{_num(self.lt)})" if self.lt is not None else high
        parts = [f"in {low}, {high}"] if low and high else []
        parts = parts or [f"{sign} {_num(b)}" for sign, _, b in self._bounds()]
        return " and ".join(parts + ["finite"] * self.finite)


_OPS = (  # Valid's bound fields: (name, sign, comparison)
    ("ge", ">=", operator.ge),
    ("gt", ">", operator.gt),
    ("le", "<=", operator.le),
    ("lt", "<", operator.lt),
)


def _num(b: float) -> str:
    return str(int(b)) if float(b).is_integer() else str(b)


def _field(default: Any, factory: Callable | None, valid: Valid) -> Any:
    meta = {META: valid}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def ranged(
    default: Any = None,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    finite: bool = False,
    null: bool | str = False,
    each: bool = False,
    why: str = "",
    factory: Callable | None = None,
) -> Any:
    """A dataclass field whose value must lie in a range (``factory``: a list's default)."""
    return _field(default, factory, Valid(ge, gt, le, lt, finite, None, null, each, why))


def choice(
    default: Any,
    choices: tuple[str, ...],
    *,
    null: bool | str = False,
    each: bool = False,
    why: str = "",
    factory: Callable | None = None,
) -> Any:
    """A dataclass field whose value must be one of ``choices``."""
    return _field(default, factory, Valid(choices=tuple(choices), null=null, each=each, why=why))


def valid_values(cls: type) -> dict[str, Valid]:
    """``{field name: Valid}`` of a schema's own declared keys (nested schemas: ask them)."""
    return {f.name: f.metadata[META] for f in dataclasses.fields(cls) if META in f.metadata}


def check_fields(obj: Any, group: str) -> None:
    """The one check of every declared key of ``obj`` (its fields' :class:`Valid`); raises
    ConfigError naming ``<group>.<field>`` (``group`` "": a top-level key)."""
    for name, valid in valid_values(type(obj)).items():
        value = getattr(obj, name)
        if not valid.accepts(value):
            key = f"{group}.{name}" if group else name
            raise ConfigError(f"{key}={value!r} is invalid: {valid.text()}")


def check(ok: bool, key: str, value: Any, want: str) -> None:
    """A rule in code (across fields, or no range or choice): the same line as a field's."""
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {want}")


def check_choice(key: str, value: str, options: tuple[str, ...]) -> None:
    check(value in options, key, value, f"choose one of {', '.join(options)}")


# ``loss.reduction`` of a training run: a gradient step needs a scalar, so the loss classes'
# "none" (per-element terms) is a library option for a user's own loop
REDUCTIONS = ("mean", "sum")
REDUCTION_WHY = (
    "a training step needs a scalar loss; reduction='none' is an option of the loss classes "
    "for your own loop, rltool.losses"
)


def loss_reduction(default: str = "mean") -> Any:
    """The ``loss.reduction`` field of an algorithm's config: mean | sum."""
    return choice(default, REDUCTIONS, why=REDUCTION_WHY)


def check_reduction(value: str) -> None:
    """``loss.reduction`` checked in code (a user's algorithm config without :func:`reduction`)."""
    check(
        value in REDUCTIONS,
        "loss.reduction",
        value,
        f"choose one of {', '.join(REDUCTIONS)} ({REDUCTION_WHY})",
    )
