"""The best policy is kept (checkpoints/best.pt), the final evaluation uses eval.final_episodes,
and summary.json says both the final and the best evaluation."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import make_cfg, metric_rows

from rltool import load_policy
from rltool.deploy.inference import restore
from rltool.errors import UserError
from rltool.run import checkpoint as ckpt
from rltool.runfolder import layout
from rltool.train import train

OVERRIDES = [
    "total_frames=1024",
    "eval.every_frames=256",
    "eval.episodes=2",
    "eval.final_episodes=3",
    "checkpoint.every_frames=256",
    "checkpoint.keep=10",
    "logger.progress=none",
    "loss.epochs=2",
]


def test_best_policy_final_episodes_and_summary(tmp_path):
    summary = train(make_cfg(*OVERRIDES), tmp_path)
    rows = metric_rows(tmp_path)
    evals = [(int(r["frames"]), float(r["eval/return_mean"])) for r in rows]
    assert [int(r["eval/episodes"]) for r in rows] == [2, 2, 2, 3]  # the final one: 3
    best_frames, best = max(evals, key=lambda e: (e[1], -e[0]))  # the first of equal bests
    assert summary["best_eval/return_mean"] == best and summary["best_eval/frames"] == best_frames
    assert summary["eval/return_mean"] == evals[-1][1]  # the final eval is the final policy's
    assert json.loads((tmp_path / layout.SUMMARY).read_text()) == summary

    # best.pt holds the policy evaluated at best_frames: the periodic checkpoint of that moment
    best_body = ckpt.load(layout.RunFolder(tmp_path).best)
    at_best = ckpt.load(tmp_path / "checkpoints" / layout.checkpoint_name(best_frames))
    for k, v in at_best["state"]["policy"].items():
        assert torch.equal(best_body["state"]["policy"][k], v), k
    assert ckpt.latest(tmp_path / "checkpoints").name == layout.checkpoint_name(1024)
    assert restore(tmp_path, "best").frames == best_frames
    policy, state = load_policy(tmp_path, checkpoint="best")
    assert policy([0.0, 0.0, 0.0, 0.0], state)[0] in (0, 1)


def test_no_best_file_without_save_best_and_a_clear_line_when_asked(tmp_path):
    summary = train(make_cfg(*OVERRIDES, "checkpoint.save_best=false"), tmp_path)
    assert summary["best_eval/return_mean"] is not None
    assert not layout.RunFolder(tmp_path).best.exists()
    with pytest.raises(UserError, match=r"'best' not found .* checkpoint.save_best=true"):
        load_policy(tmp_path, checkpoint="best")
