"""Every config key at its edges, drawn by hypothesis from what the schemas declare
(:func:`rltool.config.valid_values`, each field's type): values inside the declared set, just
outside it, huge integers, empty strings, non-ASCII, and output folders that are files, too long
or empty. Each ``rltool train`` is accepted (the training itself stubbed: the config composed and
checked) or refused with exit 2 and one line, leaving no folder; never exit 70. The other
commands' options (:mod:`rltool.cli.args`) parse or are refused with one UserError line. A new
key is covered without new test code."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import tempfile
import typing
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_config_fields import SCHEMA_KEYS

from rltool import algos, memories
from rltool.cli import args as cli_args
from rltool.cli import main
from rltool.config import Config, Valid, valid_values
from rltool.errors import UserError

HUGE = [2**64, -(2**64), 10**30]
ODD = ["", "é名", " "]
SETTINGS = settings(
    max_examples=50,
    deadline=None,  # a composition takes ~0.1-0.5 s on a loaded machine
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same draws in every run (the suite is deterministic)
)


def _setup(cls, group: str) -> list[str]:
    """The options that bring ``cls``'s keys into the config (its algorithm, its memory)."""
    for a in algos.specs():
        if group == "loss" and a.config is cls:
            return [f"loss={a.name}"]
    for m in memories.specs():
        if group == "policy.memory" and m.config is cls:
            return [f"policy={m.name}"]
    return []


def _base(hint) -> tuple[object, bool]:
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return (args[0], True) if len(args) < len(typing.get_args(hint)) else (hint, False)


def keys():
    """(setup overrides, dotted key, Valid or None, the field's type) of every plain key."""
    out = []
    for cls, group in [*SCHEMA_KEYS, (Config, "")]:
        hints, valid = typing.get_type_hints(cls), valid_values(cls)
        for f in dataclasses.fields(cls):
            kind, _ = _base(hints[f.name])
            kind = typing.get_origin(kind) or kind
            if kind not in (int, float, str, bool, list):
                continue  # a nested schema: its own keys are drawn
            key = f"{group}.{f.name}" if group else f.name
            out.append((tuple(_setup(cls, group)), key, valid.get(f.name), kind))
    return out


KEYS = keys()


def edges(valid: Valid | None, kind) -> list:
    """Values at and just past ``valid``'s edges, and the generic odd ones."""
    vals: list = [*HUGE, *ODD, None, 0, -1, float("nan"), float("inf")]
    if valid is not None and valid.choices is not None:
        vals += [*valid.choices, "not-a-choice"]
    elif valid is not None:
        step = 1 if kind is int else 1e-6
        for b, d in ((valid.ge, 0), (valid.gt, step), (valid.le, 0), (valid.lt, -step)):
            if b is not None:
                vals += [b + d, b + d - step, b + d + step]
    if valid is not None and valid.each:
        vals = [[v] for v in vals] + [[]]
    return vals


def render(v) -> str:
    """``v`` as a Hydra override value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, list):
        return "[" + ",".join(render(x) for x in v) + "]"
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        return ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(v)


@pytest.fixture
def stub_train(monkeypatch):
    """``rltool.train.train`` replaced: a job reached it, so its config was accepted."""
    calls = []

    def train(cfg, run_dir, comm, hooks):
        calls.append(cfg)
        return {"frames": 0, "wall_time_s": 0.0}

    monkeypatch.setattr("rltool.train.train", train)
    return calls


def run_train(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        rc = main(["train", *argv, "logger.progress=none"])
    return rc, err.getvalue()


def assert_accepted_or_one_line(rc: int, err: str, folder: Path, calls: list, argv) -> None:
    assert rc in (0, 2), (argv, rc, err)
    if rc == 2:
        assert err.strip().count("\n") == 0 and err.startswith("rltool train: error: "), err
        assert not folder.exists() or not any(folder.iterdir()), (argv, list(folder.iterdir()))
    else:
        assert calls, (argv, err)


@SETTINGS
@given(data=st.data())
def test_every_key_at_its_edges_is_accepted_or_refused_in_one_line(stub_train, data):
    setup, key, valid, kind = data.draw(st.sampled_from(KEYS), label="key")
    inside = st.nothing()
    if kind is float:
        inside = st.floats(allow_nan=False, width=32)
    elif kind is int:
        inside = st.integers(-(2**40), 2**40)
    elif kind is str:
        inside = st.text(max_size=6)
    value = data.draw(st.one_of(st.sampled_from(edges(valid, kind)), inside), label="value")
    with tempfile.TemporaryDirectory() as d:
        run = Path(d) / "out"
        argv = [*setup, f"{key}={render(value)}", f"hydra.run.dir={run}"]
        stub_train.clear()
        rc, err = run_train(argv)
        assert_accepted_or_one_line(rc, err, Path(d), stub_train, argv)


FOLDERS = {  # (what the folder's path is, given the test's folder d)
    "a file": lambda d: (d / "f").write_text("") or d / "f",
    "under a file": lambda d: (d / "f").write_text("") or d / "f" / "run",
    "a name too long": lambda d: d / "x" / ("a" * 300),
    "non-ASCII, too long": lambda d: d / ("é" * 200),
    "empty": lambda d: "",
    "non-ASCII": lambda d: d / "é名 run",
}


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
@pytest.mark.parametrize("what", FOLDERS)
def test_an_output_folder_the_os_refuses_is_exit_2_leaving_nothing(
    stub_train, tmp_path, monkeypatch, what, sweep
):
    monkeypatch.chdir(tmp_path)
    d = tmp_path / "d"
    d.mkdir()
    before = sorted(p.name for p in d.iterdir())
    folder = FOLDERS[what](d)
    key = "hydra.sweep.dir" if sweep else "hydra.run.dir"
    argv = [*(["-m", "seed=0"] if sweep else []), f"{key}={render(str(folder))}"]
    rc, err = run_train(argv)
    if what == "non-ASCII":
        assert rc == 0 and stub_train, err
        return
    assert rc == 2, err
    assert err.strip().count("\n") == 0 and err.startswith(f"rltool train: error: {key}="), err
    made_by_test = ["f"] if "file" in what else []
    assert sorted(p.name for p in d.iterdir()) == sorted({*before, *made_by_test})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d"]  # nothing in the working folder


def option_keys():
    for command, spec in cli_args.COMMANDS.items():
        cls = cli_args.load(spec) if hasattr(cli_args, "load") else None
        if cls is None:
            module, _, name = spec.partition(":")
            cls = getattr(__import__(module, fromlist=[name]), name)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.metadata.get("positional"):
                yield command, cls, f.name, f.metadata.get("choices"), _base(hints[f.name])[0]


OPTIONS = list(option_keys())


@settings(max_examples=150, deadline=None, derandomize=True)
@given(data=st.data())
def test_every_commands_option_at_its_edges_parses_or_is_one_line(data):
    command, cls, name, choices, kind = data.draw(st.sampled_from(OPTIONS), label="option")
    pool = [*HUGE, *ODD, "null", "true", "nan", "-1", "0", "[a,b]", "'x y'", "/", "a" * 300]
    pool += list(choices or [])
    text = data.draw(st.one_of(st.sampled_from([str(p) for p in pool]), st.text(max_size=8)))
    try:
        cli_args.parse(cls, [f"{name}={text}"], command)
    except UserError as e:
        assert "\n" not in str(e).strip(), str(e)
