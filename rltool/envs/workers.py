"""The env's processes and hangs, reported as the env's faults (exit 4) or ended within a bound.

- An async worker that dies (exits, is killed by a signal, crashes) is named by its index and how
  it ended (:func:`death`); the vector env is then ended by :func:`shutdown`: its other workers
  are killed and it is marked closed, so that neither ``close`` nor ``__del__`` waits on a pipe
  that will never answer.
- ``env.step_timeout_s``: the async backend waits with gymnasium's ``step_wait(timeout=)``; the
  sync one has a :class:`Watchdog` thread, since a hang inside C code never returns to Python's
  signal handlers: past the limit it prints the env's line and ends the process (exit 4).
- :class:`StuckWatch`: after a SIGTERM / SIGINT, a call into the env that lasts :data:`GRACE_S`
  more seconds ends the process with the signal's code (the latest checkpoint is kept as it is).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
import time
import weakref

GRACE_S = 10.0  # a call into the env still running this long after a signal: the env is stuck
LIVE: weakref.WeakSet = weakref.WeakSet()  # the EnvGuards of this process (see watch_stuck)


def how_it_ended(exitcode: int) -> str:
    """A worker's exit code (negative: the signal that killed it) in words."""
    if exitcode >= 0:
        return f"exited with code {exitcode}"
    sig = -exitcode
    try:
        name = signal.Signals(sig).name
    except ValueError:
        name = "?"
    why = {signal.SIGKILL: ", as the out-of-memory killer does", signal.SIGSEGV: ", a crash"}
    return f"was killed by signal {sig} ({name}{why.get(sig, '')})"


def death(vec_env, wait_s: float = 2.0) -> tuple[int, str] | None:
    """(index, how it ended) of the first worker process of ``vec_env`` that has ended, waiting
    up to ``wait_s`` for the exit to be seen (a closed pipe shows before the exit status); None
    where every worker is alive."""
    procs = getattr(vec_env, "processes", None) or ()
    deadline = time.monotonic() + wait_s
    while True:
        for i, p in enumerate(procs):
            if p.exitcode is not None:
                return i, how_it_ended(p.exitcode)
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def silent(vec_env) -> int | None:
    """The first worker of ``vec_env`` with no answer waiting on its pipe (the one that hangs)."""
    for i, pipe in enumerate(getattr(vec_env, "parent_pipes", None) or ()):
        try:
            if pipe is not None and not pipe.poll():
                return i
        except OSError:
            continue
    return None


def shutdown(vec_env) -> None:
    """Ends an async vector env at once: kills its workers (a hung one ignores ``close``), closes
    its pipes and marks it closed (its ``close`` and ``__del__`` then do nothing)."""
    procs = getattr(vec_env, "processes", None) or ()
    for p in procs:
        if p.exitcode is None:
            p.kill()
    for p in procs:
        p.join(timeout=5)
    for pipe in getattr(vec_env, "parent_pipes", None) or ():
        if pipe is not None:
            pipe.close()
    vec_env.closed = True


def end_process(line: str, code: int) -> None:
    """Prints ``line`` (stderr), kills the env workers of this process, exits with ``code`` at
    once: the main thread is stuck in the env and cannot unwind. The run-folder lock is an
    ``flock``: the kernel releases it; checkpoints are written atomically: the latest stays."""
    # print, not logging: the main thread may hold logging's locks while it is stuck
    print(line, file=sys.stderr, flush=True)
    for guard in list(LIVE):
        if guard.is_async:
            with contextlib.suppress(Exception):  # exiting anyway: what can be killed, is
                shutdown(guard.vec_env)
    os._exit(code)


class Watchdog:
    """A daemon thread that ends the process when ``guard``'s current call lasts over
    ``timeout_s`` (the sync backend's ``env.step_timeout_s``)."""

    def __init__(self, guard, timeout_s: float):
        self.guard, self.timeout_s = weakref.ref(guard), timeout_s
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="rltool-env-watchdog", daemon=True).start()

    def _run(self) -> None:
        tick = min(0.5, self.timeout_s / 4)
        while not self._stop.wait(tick):
            guard = self.guard()
            if guard is None:
                return
            since = guard.since
            if since is not None and time.monotonic() - since > self.timeout_s:
                err = guard.error(guard.hang_text(guard.calling), _sync_index(guard.vec_env))
                end_process(f"rltool: error: {err}", err.exit_code)

    def stop(self) -> None:
        self._stop.set()


def _sync_index(vec_env) -> int | None:
    """The index of the sub-env the main thread is in (gymnasium's sync loop), or None."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    while frame is not None:
        if frame.f_locals.get("self") is vec_env:
            i = frame.f_locals.get("i")
            return i if isinstance(i, int) else None
        frame = frame.f_back
    return None


class StuckWatch:
    """Ends the process where a call into an env lasts :data:`GRACE_S` s past a SIGTERM /
    SIGINT: one line (ending in ``tail``), exit ``codes[signal]``. The signal is seen through
    Python's wakeup fd, written by the C-level handler: a main thread stuck inside C code never
    runs the Python handler. Make it in the main thread, after the handlers are installed."""

    def __init__(self, codes: dict[int, int], tail: str):
        self.codes, self.tail = codes, tail
        self._r, w = os.pipe()
        os.set_blocking(w, False)
        self._w, self._done = w, threading.Event()
        self._old = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
        threading.Thread(target=self._run, name="rltool-stuck-env", daemon=True).start()

    def _run(self) -> None:
        first: tuple[int, float] | None = None
        while not self._done.is_set():
            ready, _, _ = select.select([self._r], [], [], 0.25)
            if ready:
                data = os.read(self._r, 64)
                signums = [b for b in data if b in self.codes]
                if first is None and signums:
                    first = signums[0], time.monotonic()
            if first is not None:
                self._check(*first)
        os.close(self._r)

    def _check(self, signum: int, t0: float) -> None:
        now, name = time.monotonic(), signal.Signals(signum).name
        for guard in list(LIVE):
            since = guard.since
            if since is not None and now - max(since, t0) > GRACE_S:
                what = f"{guard.calling}() did not return within {GRACE_S:g} s of {name}"
                end_process(
                    f"\nrltool: {name}: {guard.error(what)}; {self.tail}", self.codes[signum]
                )

    def close(self) -> None:
        """Stops watching; gives the wakeup fd back."""
        signal.set_wakeup_fd(self._old)
        self._done.set()
        os.close(self._w)
