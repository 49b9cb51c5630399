"""A saved run read back (``rltool/config/saved.py``): ``rltool train resume=`` and
``rltool.resume`` read ``config.yaml`` through the same function, refuse the same keys with the
same line, and a saved key this version does not know names the version that wrote the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import TINY_RUN

import rltool
from rltool.config import saved
from rltool.errors import EXIT_USAGE, ConfigError, UserError
from rltool.runfolder import layout


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """One tiny finished run (one checkpoint), copied by each test that edits it."""
    run = tmp_path_factory.mktemp("saved") / "run"
    rltool.fit(rltool.compose(*TINY_RUN), run)
    return run


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out, ignore=shutil.ignore_patterns(layout.LOCK))
    return out


def _refusal(cli, run: Path, *args: str) -> tuple[str, str]:
    """The CLI's one line and the API's message for resuming ``run`` with ``args``."""
    r = cli("train", f"resume={run}", *args, cwd=run.parent)
    assert r.returncode == EXIT_USAGE, r.stderr
    (line,) = r.stderr.strip().splitlines()
    with pytest.raises(UserError) as e:
        rltool.resume(run, *args)
    return line.removeprefix("rltool train: error: "), str(e.value)


def test_cli_and_api_read_the_same_config(finished):
    node = saved.load(finished)
    assert saved.saved_config(finished) == rltool.compose(*TINY_RUN)
    assert saved.saved_config(finished, "total_frames=512").total_frames == 512
    assert node.total_frames == 256  # the file, unchanged by a read


def test_cli_and_api_refuse_an_unsafe_key_with_the_same_line(finished, cli):
    line, message = _refusal(cli, finished, "total_frames=512", "policy.hidden_size=8")
    assert line == message
    assert message.startswith("policy.hidden_size cannot change when resuming (only total_frames")
    assert saved.is_safe("logger.csv.filename") and not saved.is_safe("loggers")


@pytest.mark.parametrize("version", ["0.0.1", None])
def test_an_unknown_saved_key_names_the_file_and_the_version_that_wrote_it(
    finished, tmp_path, cli, version
):
    run = _copy(finished, tmp_path)
    path = run / layout.CONFIG
    body = path.read_text().split("\n", 1)[1]  # without this version's first line
    assert "\n  hidden_size:" in body
    body = body.replace("\n  hidden_size:", "\n  wings: 2\n  hidden_size:", 1)
    path.write_text((f"{layout.WRITTEN_BY}{version}\n" if version else "") + body)
    line, message = _refusal(cli, run, "total_frames=512")
    assert line == message
    writer = f"rltool {version}" if version else saved.BEFORE_VERSIONS
    assert message == (
        f"{path} holds the key 'policy.wings', unknown to rltool {rltool.__version__}: the run's "
        f"config.yaml was written by {writer}; resume it with that version, or start a new run"
    )
    assert "spelling" not in message
    with pytest.raises(ConfigError, match="'policy.wings'"):
        saved.saved_config(run)


def test_a_top_level_key_edited_in_by_hand_is_named_too(finished, tmp_path):
    run = _copy(finished, tmp_path)
    path = run / layout.CONFIG
    path.write_text(path.read_text() + "fancy: 3\n")
    assert layout.written_by(run) == rltool.__version__
    with pytest.raises(ConfigError) as e:
        saved.load(run)
    assert str(e.value) == (
        f"{path} holds the key 'fancy', unknown to rltool {rltool.__version__} (which wrote the "
        "file: it was edited since): remove the key, or start a new run"
    )


def test_no_config_is_one_line(tmp_path):
    with pytest.raises(UserError, match="is not an rltool run folder"):
        saved.load(tmp_path)
