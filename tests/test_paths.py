"""Run folders as users type them: spaces and non-ASCII letters, plain (one shell argument) or
quoted for Hydra, through train, resume, eval and report; the end line's commands pasted back."""

from __future__ import annotations

import json
import shlex

import pytest
from conftest import TINY_EVAL

from rltool.cli.args import _grammar
from rltool.cli.resume_argv import hydra_arg, path_value

TINY = ["env=cartpole", *TINY_EVAL]


@pytest.mark.parametrize(
    "path", ["runs/ä b/run", "outputs/${now:%Y}", "it's here", "a\\'b", "end\\", "runs/a,b"]
)
def test_a_folder_reads_back_exactly_through_hydra(path):
    assert _grammar(hydra_arg("hydra.run.dir", path).split("=", 1)[1]) == path
    assert path_value(path) == path.strip() or "${" in path


def test_a_run_in_a_folder_with_a_space_and_an_umlaut(tmp_path, cli):
    r = cli("train", *TINY, "total_frames=512", "hydra.run.dir=ä b/run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    run = tmp_path / "ä b" / "run"
    assert (run / "checkpoints" / "latest").is_file()
    for resume, frames in (("resume=ä b/run", 768), ("resume='ä b/run'", 1024)):
        r = cli("train", resume, f"total_frames={frames}", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert json.loads((run / "summary.json").read_text())["frames"] == frames
    # the end line's next commands, pasted into a shell
    line = r.stdout.strip().splitlines()[-1]
    evaluate, resume = line.split("next: ", 1)[1].split(" | ")
    assert shlex.split(evaluate) == ["rltool", "eval", "run=ä b/run"]
    args = shlex.split(resume.replace("<more>", "1280"))
    assert args == ["rltool", "train", "resume=ä b/run", "total_frames=1280"]
    r = cli(*shlex.split(evaluate)[1:], "episodes=1", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads((run / "eval.json").read_text())["episodes"] == 1
    r = cli(*args[1:], cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = cli("report", "ä b", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "1,280" in r.stdout
