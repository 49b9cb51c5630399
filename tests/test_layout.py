"""The run folder's layout (rltool.runfolder.layout): the names every writer and reader uses, and
readers
that find the metrics file by the run's configured logger.csv.filename."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from rltool.analysis.results import eval_curve, find_runs, group_runs
from rltool.analysis.tables import rows
from rltool.cli import main
from rltool.run import checkpoint as ckpt
from rltool.runfolder import layout
from rltool.runfolder.layout import RunFolder

# 2 updates of 128 frames, evaluated twice on 2 episodes
TINY = [
    "total_frames=256",
    "eval.every_frames=128",
    "eval.episodes=2",
    "eval.final_episodes=2",
    "loss.epochs=2",
    "logger.progress=none",
    "collector.frames_per_batch=128",
]


def test_run_folder_names():
    run = RunFolder("out/run")
    assert run.config == Path("out/run/config.yaml")
    assert run.metrics == Path("out/run/metrics.csv")  # no config.yaml: the default name
    assert run.summary == Path("out/run/summary.json")
    assert run.status == Path("out/run/status.json")
    assert run.devices == Path("out/run/devices.json")
    assert run.eval == Path("out/run/eval.json")
    assert run.videos == Path("out/run/videos")
    assert run.checkpoints == Path("out/run/checkpoints")
    assert run.latest == Path("out/run/checkpoints/latest")
    assert run.overrides == Path("out/run/.hydra/overrides.yaml")
    assert run.wandb_id == Path("out/run/wandb_id")
    assert layout.checkpoint_name(12288) == "ckpt-000000012288.pt"
    assert layout.checkpoint_frames("ckpt-000000012288.pt") == 12288
    assert layout.checkpoint_frames("ckpt-12288.pt") is None
    assert layout.checkpoint_frames(".ckpt-000000012288.pt.tmp-1") is None
    assert layout.interrupted_name("metrics.csv", 2) == "metrics.csv.interrupted-2"


def test_layout_imports_nothing_heavy():
    code = (
        "import sys, rltool.runfolder.layout; print(sorted({'torch', 'hydra'} & set(sys.modules)))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"


def test_metrics_name_comes_from_the_run_config(tmp_path):
    assert layout.metrics_name(tmp_path) == "metrics.csv"
    (tmp_path / "config.yaml").write_text("logger:\n  csv:\n    filename: other.csv\n")
    assert RunFolder(tmp_path).metrics == tmp_path / "other.csv"
    (tmp_path / "config.yaml").write_text("seed: 0\n")  # says nothing: the default
    assert layout.metrics_name(tmp_path) == "metrics.csv"
    (tmp_path / "config.yaml").write_text("{ not yaml")  # unreadable: the default
    assert layout.metrics_name(tmp_path) == "metrics.csv"


def test_checkpoint_writer_uses_the_layout_names(tmp_path):
    run = RunFolder(tmp_path)
    assert not layout.has_checkpoint(tmp_path)
    path = ckpt.save(ckpt.checkpoint_dir(tmp_path), 512, {"w": torch.zeros(1)})
    assert path == run.checkpoints / layout.checkpoint_name(512)
    assert run.latest.read_text().strip() == path.name
    assert layout.has_checkpoint(tmp_path) and ckpt.latest(run.checkpoints) == path


def _eval_rows(path: Path) -> list[dict]:
    with path.open(newline="") as f:
        return [r for r in csv.DictReader(f) if r["eval/return_mean"]]


def test_report_and_plot_read_the_configured_metrics_file(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    args = ["train", "-m", "seed=0,1", "logger.csv.filename=other.csv", *TINY]
    assert main([*args, f"hydra.sweep.dir={sweep}"]) == 0
    capsys.readouterr()
    for job in ("0", "1"):
        assert (sweep / job / "other.csv").is_file() and not (sweep / job / "metrics.csv").exists()

    runs = find_runs([str(sweep)])
    assert [r.path.name for r in runs] == ["0", "1"]
    evals = _eval_rows(sweep / "0" / "other.csv")
    x, y = eval_curve(runs[0])
    assert x.tolist() == [128.0, 256.0] == [float(r["frames"]) for r in evals]
    assert y.tolist() == [float(r["eval/return_mean"]) for r in evals]
    (table,) = rows(group_runs(runs))
    assert table["seeds"] == 2 and table["status"] == "2 done" and table["frames"] == 256

    assert main(["report", str(sweep)]) == 0
    assert "2 done" in capsys.readouterr().out
    png = tmp_path / "curves.png"
    assert main(["plot", str(sweep), f"out={png}"]) == 0  # eval values found in other.csv
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "1 setting(s)" in capsys.readouterr().out
    for bad, words in ((png.with_suffix(".xyz"), "cannot write .xyz files"), (png / "x.png", "")):
        assert main(["plot", str(sweep), f"out={bad}"]) == 2  # bad input, not a bug
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and words in err and "bug" not in err, err

    # a run folder without status.json or summary.json is still found by its metrics file
    bare = tmp_path / "bare" / "run"
    bare.mkdir(parents=True)
    for name in ("config.yaml", "other.csv"):
        (bare / name).write_bytes((sweep / "0" / name).read_bytes())
    (found,) = find_runs([str(tmp_path / "bare")])
    assert found.path == bare and eval_curve(found)[0].tolist() == [128.0, 256.0]

    # a job started again without a checkpoint sets its old metrics file aside by that name
    job = sweep / "0"
    old = (job / "other.csv").read_text()
    for p in RunFolder(job).checkpoints.iterdir():
        p.unlink()
    status = json.loads(RunFolder(job).status.read_text())
    RunFolder(job).status.write_text(json.dumps({**status, "status": "running"}))
    assert main([*args, f"hydra.sweep.dir={sweep}"]) == 0
    assert (job / "other.csv.interrupted-1").read_text() == old
    assert len((job / "other.csv").read_text().splitlines()) == len(old.splitlines())
    assert OmegaConf.load(job / "config.yaml").logger.csv.filename == "other.csv"
