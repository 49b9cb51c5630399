"""The CLI: a tiny training run, help, config printing, bad input. Exit codes and output are
checked in-process (the ``cli`` fixture); a real process where it matters (the training run, a
traceback, a closed pipe)."""

import json
import subprocess
import sys

import pytest
from conftest import cli_env, metric_rows, run_cli


def test_train_tiny_budget_writes_run_dir(tmp_path):
    r = run_cli(
        "train",
        "total_frames=512",
        "eval.episodes=2",
        "eval.final_episodes=2",
        "logger.progress=lines",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    runs = list((tmp_path / "outputs").glob("*/*"))
    assert len(runs) == 1
    run = runs[0]
    assert (run / "config.yaml").exists() and (run / ".hydra" / "config.yaml").exists()
    rows = metric_rows(run, with_time=True)
    assert [int(r["frames"]) for r in rows] == [256, 512]
    for col in ("time/collect_s", "time/update_s", "time/eval_s", "loss_actor", "approx_kl"):
        assert rows[-1][col] != ""
    summary = json.loads((run / "summary.json").read_text())
    assert summary["frames"] == 512 and summary["eval/episodes"] == 2
    assert "frames 512/512" in r.stderr  # progress lines when not a terminal


def test_help_lists_commands_and_groups(tmp_path, cli):
    top = cli("--help", cwd=tmp_path)
    assert top.returncode == 0 and "train" in top.stdout
    r = cli("train", "--help", cwd=tmp_path)
    assert r.returncode == 0
    for group in ("env:", "policy:", "loss:", "collector:", "optim:", "logger:", "experiment:"):
        assert group in r.stdout
    assert "cartpole_pomdp" in r.stdout and "pendulum_ppo" in r.stdout


def test_cfg_job_prints_composed_config(tmp_path, cli):
    r = cli("train", "--cfg", "job", "env=cartpole_pomdp", "seed=3", cwd=tmp_path)
    assert r.returncode == 0 and "obs_keep:" in r.stdout and "seed: 3" in r.stdout
    assert not (tmp_path / "outputs").exists()


@pytest.mark.parametrize(
    "args,words",
    [
        (["env=nope"], "unknown option env=nope"),
        (["env=gym", "env.id=NotAnEnv-v0"], "NotAnEnv-v0"),
        (["policy.hidden_sizes=[-1]"], "policy.hidden_sizes"),
        (["total_frames=abc"], "total_frames='abc' is invalid: expected an integer"),
        (["optim.lr=-1"], "optim.lr"),
        (["env=gym", "env.id=fake_envs:FakeSequenceObs-v0"], "observation entry 'seq' is Sequence"),
        (["foo=1"], "unknown config key 'foo'"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, cli, args, words):
    r = cli("train", *args, cwd=tmp_path)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in r.stderr, r.stderr


def test_unknown_command(tmp_path, cli):
    r = cli("trian", cwd=tmp_path)
    assert r.returncode == 2 and "unknown command 'trian'" in r.stderr


def test_debug_shows_the_traceback(tmp_path):
    r = run_cli("--debug", "train", "optim.lr=-1", cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" in r.stderr


def _broken_train(cfg, run_dir, comm=None, hooks=None):
    raise RuntimeError("tensor sizes do not match\nsecond line")


def test_internal_error_is_one_line_exit_70(tmp_path, monkeypatch, capsys):
    import rltool.train
    from rltool.cli import main
    from rltool.errors import EXIT_SOFTWARE

    monkeypatch.setattr(rltool.train, "train", _broken_train)  # a bug inside the train path
    run_dir = tmp_path / "run"
    args = ["train", "total_frames=512", f"hydra.run.dir={run_dir}"]
    assert main(args) == EXIT_SOFTWARE == 70
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "rltool train: internal error (a bug in rltool): RuntimeError: tensor sizes do not "
        "match; rerun with --debug for the traceback"
    ]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    with pytest.raises(RuntimeError, match="tensor sizes do not match"):
        main(["--debug", *args])


def test_bad_input_in_process_is_exit_2_and_names_no_bug(tmp_path, capsys):
    from rltool.cli import main
    from rltool.errors import EXIT_USAGE

    for args in (["env=nope"], ["foo.bar=1"], ["seed=abc"], ["optim.lr=-1"]):
        assert main(["train", *args, f"hydra.run.dir={tmp_path}"]) == EXIT_USAGE
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "bug" not in err, err


def _options(group):
    """The real options of a config group: its YAML files (the schemas are registered in code)."""
    from pathlib import Path

    from rltool.config.store import conf_dir

    return ", ".join(sorted(p.stem for p in (Path(conf_dir()) / group).glob("*.yaml")))


def test_schemas_are_no_options(tmp_path, cli):
    r = cli("train", "--help", cwd=tmp_path)
    assert r.returncode == 0 and "base_" not in r.stdout
    assert f"policy: {_options('policy')}" in r.stdout and "loss: dqn, ppo" in r.stdout
    for arg in ("policy=base_policy", "env=base_env", "loss=base_dqn", "policy=nope"):
        r = cli("train", arg, cwd=tmp_path)
        assert r.returncode == 2
        group, name = arg.split("=")
        assert r.stderr.strip() == (
            f"rltool train: error: unknown option {group}={name}: choose one of {_options(group)}"
        )
    assert list(tmp_path.iterdir()) == []


def test_output_into_a_pipe_its_reader_closed_is_not_an_error():
    """``rltool ... | head``: the reader stops early; rltool exits 0, without a traceback or
    an "internal error" line."""
    p = subprocess.Popen(
        [sys.executable, "-m", "rltool", "report", "--help"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
        text=True,
    )
    p.stdout.close()  # closed before rltool writes a line
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and err == "", err
