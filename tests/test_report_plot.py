"""``rltool report`` and ``rltool plot`` on what a user finds: folders of garbage, runs with few
evaluations; and the default ``eval.every_frames`` that keeps a short run's curve."""

from __future__ import annotations

import shutil

import pytest
from conftest import make_cfg

from rltool.cli import main
from rltool.config import default_eval_every
from rltool.errors import EXIT_OK, EXIT_USAGE

TINY = ["eval.episodes=2", "loss.epochs=1", "logger.progress=none"]


@pytest.mark.parametrize(
    "total,every", [(8192, 1638), (40960, 8192), (49_999, 9999), (50_000, 10_000), (10**6, 10_000)]
)
def test_default_eval_every_is_a_fifth_of_a_small_budget(total, every):
    assert default_eval_every(total) == every
    assert make_cfg(f"total_frames={total}").eval.every_frames == every
    assert make_cfg(f"total_frames={total}", "eval.every_frames=7").eval.every_frames == 7


def test_plot_warns_under_3_points_and_draws_training_returns(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    few, many = tmp_path / "few", tmp_path / "many"
    args = ["train", "total_frames=1024", "collector.frames_per_batch=256", *TINY]
    assert main([*args, "eval.every_frames=100000", f"hydra.run.dir={few}"]) == 0
    assert main([*args, f"hydra.run.dir={many}"]) == 0  # the default: every 204 frames
    capsys.readouterr()
    assert main(["plot", str(many), f"out={tmp_path / 'a.png'}"]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["plot", str(few), f"out={tmp_path / 'b.png'}"]) == 0
    err = capsys.readouterr().err
    assert f"fewer than 3 eval/return_mean points ({few} has 1;" in err
    assert "drawing train/return_mean instead" in err
    assert (tmp_path / "b.png").stat().st_size > 1000


def test_report_marks_unreadable_folders(tmp_path, capsys, tiny_run):
    shutil.copytree(tiny_run, tmp_path / "runs" / "good")
    junk = tmp_path / "runs" / "junk"
    junk.mkdir()
    (junk / "config.yaml").write_text("a: [unclosed\n")
    (junk / "metrics.csv").write_text("garbage\x00\x01,,\nmore junk\n")
    csv_only = tmp_path / "runs" / "csv_only"
    csv_only.mkdir()
    (csv_only / "metrics.csv").write_text("not,an,rltool,file\n1,2,3,4\n")
    status_junk = tmp_path / "runs" / "status_junk"
    status_junk.mkdir()
    (status_junk / "status.json").write_text("{not json")
    capsys.readouterr()
    assert main(["report", str(tmp_path / "runs")]) == EXIT_OK
    out = capsys.readouterr()
    assert "unknown" not in out.out and len(out.out.strip().splitlines()) == 2  # head + 1 row
    lines = out.err.strip().splitlines()
    assert len(lines) == 3 and all("unreadable" in ln for ln in lines), lines
    for name in ("junk", "csv_only", "status_junk"):
        assert sum(f"/{name}: unreadable" in ln for ln in lines) == 1, (name, lines)
    # nothing readable: non-zero
    assert main(["report", str(junk), str(csv_only)]) == EXIT_USAGE
    out = capsys.readouterr()
    assert out.out == "" and "no runs found" in out.err
    assert sum(": unreadable, left out" in ln for ln in out.err.splitlines()) == 2
