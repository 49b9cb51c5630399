"""A resume compares the checkpoint's parts with the run's own before loading them: a layout that
differs is one line naming the first differing entry (exit 2, nothing changed); what a
``load_state_dict`` raises after that is a bug (exit 70); a run at its budget is nothing to do."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from rltool.cli import main
from rltool.errors import EXIT_OK, EXIT_SOFTWARE, EXIT_USAGE
from rltool.run import checkpoint as ckpt


@pytest.fixture
def run(tiny_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(tiny_run, run_dir)
    return run_dir


def resume(capsys, run_dir, *args) -> tuple[int, list[str]]:
    code = main(["train", f"resume={run_dir}", *args])
    return code, capsys.readouterr().err.strip().splitlines()


def edit_policy(run_dir, edit) -> str:
    """Rewrites the latest checkpoint with ``edit(policy_state, key)`` applied to its first
    tensor's key; returns that key."""
    path = ckpt.latest(run_dir / "checkpoints")
    body = torch.load(path, weights_only=True)
    key = next(iter(body["state"]["policy"]))
    edit(body["state"]["policy"], key)
    torch.save(body, path)
    return key


def _grow(state, key):
    state[key] = torch.zeros(state[key].shape[0] + 1, *state[key].shape[1:])


@pytest.mark.parametrize(
    "edit,words",
    [
        (_grow, "{key} has shape [{n1}, {m}], this run's [{n}, {m}]"),
        (lambda s, k: s.pop(k), "{key} is missing (this run has it)"),
        (lambda s, k: s.__setitem__("extra.weight", torch.zeros(2)), "extra.weight is not in"),
        (
            lambda s, k: s.__setitem__(k, s[k].double()),
            "{key} has dtype torch.float64, this run's ",
        ),
    ],
    ids=["shape", "missing", "extra", "dtype"],
)
def test_a_checkpoint_of_another_layout_is_one_line_naming_the_entry(run, capsys, edit, words):
    path = ckpt.latest(run / "checkpoints")
    before = {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()}
    shape = torch.load(path, weights_only=True)["state"]["policy"]
    key = edit_policy(run, edit)
    n, m = shape[key].shape if key in shape else (0, 0)
    before[path.name] = path.read_bytes()
    code, err = resume(capsys, run, "total_frames=512")
    assert code == EXIT_USAGE and len(err) == 1, err
    assert "checkpoint part policy: " in err[0] and "start a new run" in err[0]
    assert words.format(key=key, n=n, n1=n + 1, m=m) in err[0], err[0]
    assert {p.name: p.read_bytes() for p in (run / "checkpoints").iterdir()} == before


def test_a_load_state_dict_that_raises_after_the_check_is_a_bug(run, capsys, monkeypatch):
    from rltool.optim.guard import NonFiniteGuard

    def broken(self, state):
        raise KeyError("a bug in a load_state_dict")

    monkeypatch.setattr(NonFiniteGuard, "load_state_dict", broken)
    code, err = resume(capsys, run, "total_frames=512")
    assert code == EXIT_SOFTWARE and err[-1].startswith("rltool train: internal error"), err
    assert "a bug in a load_state_dict" in err[-1]


def test_resuming_a_run_at_its_budget_is_nothing_to_do(run, capsys):
    status = json.loads((run / "status.json").read_text())
    code, err = resume(capsys, run)
    assert code == EXIT_OK, err
    assert any("already reached 256 frames" in line and "nothing to do" in line for line in err)
    assert "Traceback" not in "\n".join(err)
    assert json.loads((run / "status.json").read_text())["status"] == status["status"] == "done"
