"""wandb (offline) and TensorBoard loggers: records read back, frames as the step, the config,
the same wandb run id across a resume, and a mode choice that never waits on the network."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import metric_rows
from wandb_records import config, history, run_record, step_metrics

from rltool.cli import main
from rltool.logging.wandb import resolve_mode

TINY = [
    "total_frames=384",
    "collector.frames_per_batch=128",
    "eval.every_frames=128",
    "eval.episodes=2",
    "eval.final_episodes=2",
    "loss.epochs=2",
    "logger.progress=none",
]


def wandb_file(run: Path, rid: str, n: int) -> Path:
    files = sorted(run.glob(f"wandb/offline-run-*-{rid}/run-{rid}.wandb"))
    assert len(files) == n, files
    return files[-1]


def test_wandb_offline_records_read_back_and_resume_keeps_the_id(tmp_path):
    run = tmp_path / "run"
    args = [
        "train",
        "logger=[csv,wandb]",
        "logger.wandb.mode=offline",
        "logger.wandb.project=rltool-test",
        "logger.wandb.tags=[a,b]",
        *TINY,
        f"hydra.run.dir={run}",
    ]
    assert main(args) == 0
    rid = (run / "wandb_id").read_text().strip()
    path = wandb_file(run, rid, 1)
    assert run_record(path).run_id == rid
    assert list(run_record(path).tags) == ["a", "b"]
    assert step_metrics(path)["*"] == "frames"
    rows = history(path)
    expected = metric_rows(run, with_time=True)
    assert [r["frames"] for r in rows] == [int(r["frames"]) for r in expected] == [128, 256, 384]
    assert [r["eval/return_mean"] for r in rows] == [float(r["eval/return_mean"]) for r in expected]
    cfg = config(path)
    assert cfg["env"]["id"] == "CartPole-v1" and cfg["total_frames"] == 384
    assert cfg["logger"]["wandb"]["project"] == "rltool-test"

    # resume= with a larger budget continues the same wandb run, from the checkpoint's frames
    assert main(["train", f"resume={run}", "total_frames=512"]) == 0
    assert (run / "wandb_id").read_text().strip() == rid
    resumed = wandb_file(run, rid, 2)
    assert run_record(resumed).run_id == rid
    assert [r["frames"] for r in history(resumed)] == [512]


def test_tensorboard_events_read_back_with_frames_as_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    assert main(["train", "logger=[csv,tensorboard]", *TINY, f"hydra.run.dir={run}"]) == 0
    acc = EventAccumulator(str(run / "tensorboard"))
    acc.Reload()
    events = acc.Scalars("eval/return_mean")
    rows = metric_rows(run, with_time=True)
    assert [e.step for e in events] == [int(r["frames"]) for r in rows]
    assert [e.value for e in events] == pytest.approx([float(r["eval/return_mean"]) for r in rows])
    assert "loss_actor" in acc.Tags()["scalars"]


def test_wandb_disabled_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")  # the config's mode wins, as in wandb.init
    run = tmp_path / "run"
    args = ["train", "logger=[csv,wandb]", "logger.wandb.mode=disabled", *TINY]
    assert main([*args, f"hydra.run.dir={run}"]) == 0
    assert not (run / "wandb").exists() and (run / "metrics.csv").exists()


def test_online_without_key_or_network_falls_back_to_offline(
    tmp_path, monkeypatch, capsys, console
):
    netrc = tmp_path / "netrc"
    netrc.write_text("")
    monkeypatch.setenv("NETRC", str(netrc))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    assert resolve_mode("online") == "offline"
    assert "no wandb API key" in capsys.readouterr().err
    # a key but nothing listening on the server's port: refused at once, no waiting
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    assert resolve_mode("online") == "offline"
    assert "127.0.0.1:9 is unreachable" in capsys.readouterr().err
    assert resolve_mode("offline") == "offline" and resolve_mode("disabled") == "disabled"


def test_logger_options_combine_in_any_order():
    from hydra import compose, initialize_config_dir

    from rltool.config.store import conf_dir

    with initialize_config_dir(config_dir=conf_dir(), version_base="1.3"):
        for opts in ("[csv,wandb,tensorboard]", "[tensorboard,wandb,csv]", "[wandb,tensorboard]"):
            cfg = compose("config", [f"logger={opts}", "logger.wandb.project=p"])
            assert cfg.logger.wandb.enabled and cfg.logger.tensorboard.enabled
            assert cfg.logger.wandb.project == "p" and cfg.logger.csv.filename == "metrics.csv"
        cfg = compose("config", ["logger=csv"])
        assert not cfg.logger.wandb.enabled and not cfg.logger.tensorboard.enabled
