"""Several trials at once (``rltool tune ... parallel=P``): each trial's sweep in its own
``python -m rltool train -m`` process, its output in ``<study>/logs/trial-<n>.log``.

The children share nothing with the tune process but the study's storage (their jobs report
evaluations to it, as joblib workers do) and the folders. A SIGTERM / SIGINT to the tune process
is passed on to every child once (each checkpoints and stops, as any run does); children start in
their own session, so a terminal's Ctrl-C reaches them only through this forwarding, never twice
(twice would stop them without a checkpoint). A child whose tune process dies is sent SIGTERM by
the kernel (Linux: ``PR_SET_PDEATHSIG``), so no trial runs on unwatched.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

_log = logging.getLogger(__name__)

POLL_S = 0.2


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # not Linux (no prctl): the child outlives a killed parent
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG


class Pool:
    """Child processes by trial number."""

    def __init__(self, logs: Path):
        self.logs = Path(logs)
        self.procs: dict[int, subprocess.Popen] = {}
        self.stop_signal: int | None = None
        self._old: dict[int, object] = {}

    def __enter__(self) -> Pool:
        for s in (signal.SIGTERM, signal.SIGINT):
            self._old[s] = signal.signal(s, self._forward)
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:  # an error here: the children stop too (checkpointed)
            self._signal_all(signal.SIGTERM)
            for p in self.procs.values():
                p.wait()
        for s, h in self._old.items():
            signal.signal(s, h)

    def _forward(self, signum, _frame) -> None:
        if self.stop_signal is None:
            _log.warning(
                f"\nrltool tune: {signal.Signals(signum).name}: stopping the running trials "
                "(each writes a checkpoint)"
            )
        self.stop_signal = signum
        self._signal_all(signum)

    def _signal_all(self, signum: int) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signum)

    def log(self, number: int) -> Path:
        return self.logs / f"trial-{number:04d}.log"

    def start(self, number: int, argv: list[str]) -> None:
        """``python -m rltool <argv>`` for trial ``number``."""
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.log(number), "a") as out:
            self.procs[number] = subprocess.Popen(
                [sys.executable, "-m", "rltool", *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    def wait_any(self) -> tuple[int, int]:
        """(trial number, exit status) of a child that ended (removed from the pool)."""
        while True:
            for number, p in self.procs.items():
                if p.poll() is not None:
                    del self.procs[number]
                    return number, p.returncode
            time.sleep(POLL_S)

    def last_line(self, number: int) -> str:
        """The last line a trial's process wrote (its error, when it failed to start)."""
        try:
            lines = self.log(number).read_text().strip().splitlines()
        except OSError:
            return ""
        return lines[-1] if lines else ""
