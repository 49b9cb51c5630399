"""rltool's terminal lines go through ``logging`` (:mod:`rltool.console`): the commands show each
message as it is on the stream it always went to; a library user configures what shows."""

from __future__ import annotations

import io
import logging
import subprocess
import sys

import pytest
from conftest import cli_env

from rltool.console import NAME, STDOUT, ConsoleHandler, cli_output

log = logging.getLogger("rltool.test_console")


def test_the_commands_show_each_message_on_its_stream(capsys):
    with cli_output():
        log.info("rltool: a note")
        log.info("rltool test: a result", extra=STDOUT)
        log.warning("rltool: warning: a warning")
        log.debug("rltool: not shown")
    out, err = capsys.readouterr()
    assert out == "rltool test: a result\n"
    assert err == "rltool: a note\nrltool: warning: a warning\n"


def test_the_handler_writes_to_the_streams_of_the_moment(monkeypatch):
    with cli_output():
        for name in ("stdout", "stderr"):
            stream = io.StringIO()
            monkeypatch.setattr(sys, name, stream)  # after the handler was installed
            log.info("line", extra=STDOUT if name == "stdout" else None)
            assert stream.getvalue() == "line\n"


def test_a_failed_write_raises_as_print_would(monkeypatch):
    class Closed(io.StringIO):
        def write(self, _text):
            raise BrokenPipeError

    monkeypatch.setattr(sys, "stdout", Closed())
    with cli_output(), pytest.raises(BrokenPipeError):
        log.info("rltool test: into a closed pipe", extra=STDOUT)


def test_cli_output_leaves_the_logger_as_it_found_it():
    logger = logging.getLogger(NAME)
    before = (logger.level, logger.propagate, list(logger.handlers))
    with cli_output():
        assert not logger.propagate  # Hydra's job logging on the root would print it twice
        with cli_output():  # nested: still one handler
            assert sum(isinstance(h, ConsoleHandler) for h in logger.handlers) == 1
    assert (logger.level, logger.propagate, list(logger.handlers)) == before


def test_a_library_user_sees_warnings_only_until_logging_is_configured(tmp_path):
    code = (
        "import logging, sys\n"
        "from rltool.errors import note, warn\n"
        "note('a note'); warn('a warning')\n"
        "logging.basicConfig(level=logging.INFO, format='%(message)s', stream=sys.stdout)\n"
        "note('another note')\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    assert r.stderr == "rltool: warning: a warning\n"  # logging's last resort: WARNING and up
    assert r.stdout == "rltool: another note\n"


def test_the_live_progress_line_shows_only_while_the_logger_lets_info_through(monkeypatch):
    from rltool.logging.progress import ProgressLogger

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    progress = ProgressLogger(total_frames=100)
    assert progress.mode == "live"
    logger = logging.getLogger(NAME)
    with cli_output():
        logger.setLevel(logging.CRITICAL)
        progress.log({"frames": 50, "fps": 10.0})
        assert sys.stderr.getvalue() == ""
        logger.setLevel(logging.INFO)
        progress.log({"frames": 100, "fps": 10.0})
    assert sys.stderr.getvalue().startswith("\rframes 100/100 (100%) | 10 fps")
