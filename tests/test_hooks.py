"""Process state: a run's hooks are its own (no module-level registry), and the dispatcher leaves
``os.environ`` and ``sys.argv`` as they were, whatever a command does."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import make_cfg

from rltool.cli import main
from rltool.errors import EXIT_OK, EXIT_USAGE
from rltool.run.hooks import Hooks
from rltool.train import train

TINY = ("env=cartpole", "total_frames=1024", "eval.every_frames=256", "logger.progress=none")
SMALL_EVAL = ("eval.episodes=1", "eval.final_episodes=1", "collector.frames_per_batch=256")


class Stop(Exception):
    pass


def test_two_runs_in_one_process_each_call_only_their_own_hooks(tmp_path):
    seen: dict[str, list] = {"a": [], "b": []}

    def record(name):
        return lambda run_dir, row: seen[name].append((run_dir, row["frames"]))

    for name in "ab":
        (tmp_path / name).mkdir()
        train(make_cfg(*TINY, *SMALL_EVAL), tmp_path / name, hooks=Hooks(on_eval=[record(name)]))
    for name in "ab":  # the periodic evaluations (256, 512, 768), not the final one
        assert seen[name] == [(tmp_path / name, f) for f in (256, 512, 768)]

    def stop(run_dir, row):
        raise Stop(f"stop at {row['frames']}")

    for name in "cd":
        (tmp_path / name).mkdir()
    with pytest.raises(Stop, match="stop at 256"):  # a hook that raises stops its own run...
        train(make_cfg(*TINY, *SMALL_EVAL), tmp_path / "c", hooks=Hooks(on_eval=[stop]))
    seen["d"] = []
    train(make_cfg(*TINY, *SMALL_EVAL), tmp_path / "d", hooks=Hooks(on_eval=[record("d")]))
    assert [f for _, f in seen["d"]] == [256, 512, 768]  # ...and not the next one
    assert not (tmp_path / "c" / "summary.json").exists()
    assert (tmp_path / "d" / "summary.json").exists()


def test_main_leaves_environ_and_argv_as_they_were(tmp_path, capsys):
    env, argv = dict(os.environ), list(sys.argv)
    refused = main(["train", "optim.lr=-1", f"hydra.run.dir={tmp_path / 'refused'}"])
    assert refused == EXIT_USAGE and "optim.lr" in capsys.readouterr().err
    assert dict(os.environ) == env and sys.argv == argv
    run_dir = tmp_path / "run"
    args = [*TINY, *SMALL_EVAL, "total_frames=256", f"hydra.run.dir={run_dir}"]
    assert main(["train", *args]) == EXIT_OK
    assert (run_dir / "summary.json").exists()
    assert dict(os.environ) == env and sys.argv == argv
