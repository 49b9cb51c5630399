"""The public Python API (``rltool.compose / fit / resume / evaluate / load_policy / Hooks``)
does what the commands do, and the documented TensorDict example runs."""

from __future__ import annotations

import json
import logging
import re

import pytest
from conftest import ROOT, TINY_EVAL, TINY_RUN, metric_rows

import rltool
from rltool.errors import UserError
from rltool.runfolder import layout

TINY = ("env=cartpole_pomdp", "policy=gru", "total_frames=2048", "eval.every_frames=1024")
TINY += tuple(TINY_EVAL)


def test_the_public_names_are_exported():
    assert set(rltool.__all__) >= {"compose", "fit", "resume", "evaluate", "load_policy"}
    for name in rltool.__all__:
        assert callable(getattr(rltool, name)), name


def test_train_resume_evaluate_load_as_the_commands_do(tmp_path, cli):
    seen = []
    hooks = rltool.Hooks(on_eval=[lambda run_dir, row: seen.append(row["frames"])])
    cfg = rltool.compose(*TINY, "checkpoint.every_frames=1024")
    summary = rltool.fit(cfg, tmp_path / "run", hooks=hooks)
    assert summary["frames"] == 2048 and seen == [1024]  # the final evaluation is no hook's
    assert json.loads((tmp_path / "run" / layout.SUMMARY).read_text()) == summary

    first = metric_rows(tmp_path / "run")
    more = rltool.resume(tmp_path / "run", "total_frames=3072")  # exact resume: test_resume.py
    rows = metric_rows(tmp_path / "run")
    assert more["frames"] == 3072 and rows[: len(first)] == first
    assert [r["frames"] for r in rows] == ["1024", "2048", "3072"]
    assert rltool.saved_config(tmp_path / "run").total_frames == 3072

    result = rltool.evaluate(tmp_path / "run", episodes=3)
    r = cli("eval", f"run={tmp_path / 'run'}", "episodes=3", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    from_cli = json.loads((tmp_path / "run" / layout.EVAL).read_text())
    assert result["returns"] == from_cli["returns"] and result["episodes"] == 3

    policy, state = rltool.load_policy(tmp_path / "run")
    assert set(state) >= {"recurrent_state_h"}


def test_resume_refuses_what_a_resume_cannot_change(tmp_path):
    rltool.fit(rltool.compose(*TINY), tmp_path / "run")
    with pytest.raises(UserError, match="policy.hidden_size cannot change when resuming"):
        rltool.resume(tmp_path / "run", "policy.hidden_size=8")
    with pytest.raises(UserError, match="holds no checkpoint"):
        rltool.resume(tmp_path)


def test_the_saved_config_is_the_one_that_ran(tmp_path):
    cfg = rltool.compose(*TINY)
    rltool.fit(cfg, tmp_path / "run")
    assert rltool.saved_config(tmp_path / "run") == cfg


def python_blocks(page: str) -> list[str]:
    """The ```python blocks of a docs page marked ``<!-- test: run -->`` just above."""
    text = (ROOT / "docs" / page).read_text()
    return re.findall(r"<!-- test: run -->\n```python\n(.*?)```", text, re.S)


def test_the_tensordict_example_of_the_docs_runs():
    blocks = python_blocks("how-to/tensordict-modules.md")
    assert blocks
    for code in blocks:
        exec(compile(code, "tensordict-modules.md", "exec"), {})


def test_fit_prints_nothing_once_the_rltool_logger_is_off(tmp_path, capfd, console):
    # progress lines and a resume's note would show (as the commands show them) at INFO
    tiny = [o for o in TINY_RUN if not o.startswith("logger.progress=")]
    cfg = rltool.compose(*tiny, "logger.progress=lines")
    logger = logging.getLogger("rltool")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        rltool.fit(cfg, tmp_path / "run")
        rltool.resume(tmp_path / "run", "total_frames=512")
    finally:
        logger.setLevel(level)
    assert capfd.readouterr() == ("", "")
    rltool.resume(tmp_path / "run", "total_frames=768")
    err = capfd.readouterr().err
    assert err.startswith("rltool: resuming ") and "frames 768/768 (100%)" in err
