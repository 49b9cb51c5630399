"""rltool's terminal lines go through :mod:`logging`: the ``rltool`` logger and its children
(``logging.getLogger(__name__)`` in each module). Each record's message is the whole line, in
rltool's voice (``rltool: warning: ...``).

As a library rltool configures nothing (the logging HOWTO): its records reach whatever the
application set up; with nothing set up, WARNING and above show on stderr through logging's
last resort. The commands (:mod:`rltool.cli`) show them with :func:`cli_output`: each message
as it is, on stderr, or on stdout for a record logged with ``extra=STDOUT`` (a result line of a
command, where it always went).
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator

NAME = "rltool"
_FIELD = "rltool_stdout"
STDOUT = {_FIELD: True}  # ``extra=`` of a line the commands show on stdout, not stderr


class ConsoleHandler(logging.Handler):
    """Each record's message as one line on the *current* ``sys.stdout`` (a record logged with
    ``extra=STDOUT``) or ``sys.stderr``, flushed. A write that fails (a closed pipe) raises to
    the caller, as ``print`` would, instead of logging's "--- Logging error ---" report."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = sys.stdout if getattr(record, _FIELD, False) else sys.stderr
        stream.write(self.format(record) + "\n")
        stream.flush()


@contextlib.contextmanager
def cli_output(level: int = logging.INFO) -> Iterator[None]:
    """rltool's records at ``level`` and above on the terminal (:class:`ConsoleHandler`) while
    it lasts, and not passed on to the root logger, where Hydra's job logging would print them
    a second time. Inside another ``cli_output`` it changes nothing."""
    logger = logging.getLogger(NAME)
    if any(isinstance(h, ConsoleHandler) for h in logger.handlers):
        yield
        return
    handler, saved = ConsoleHandler(), (logger.level, logger.propagate)
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])  # clears the loggers' cached levels
        logger.propagate = saved[1]
