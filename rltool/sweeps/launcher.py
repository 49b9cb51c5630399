"""``hydra/launcher=joblib`` that survives the loss of one worker.

Hydra's joblib launcher runs every job in one loky pool: when one worker process dies (SIGKILL,
the out-of-memory killer), loky marks the whole pool broken, kills the other workers and the sweep
ends with ``BrokenProcessPool`` (exit 70), another job left ``running`` and the rest never run.
Here each job runs in a one-worker loky executor of its own (``hydra.launcher.n_jobs`` of them at
once), so a dead worker costs its own job only: that job is recorded ``failed`` with the signal,
the others go on, and the sweep ends with exit 1 (the same command resumes it). A job whose worker
alone is sent SIGTERM checkpoints and is recorded ``interrupted`` (:func:`rltool.sweeps.jobs.
run_job`). A SIGTERM / SIGINT to the sweep itself (the process group, Slurm, Ctrl-C) reaches the
workers too: no further job starts and the sweep exits 75 once the running ones checkpointed.
"""

from __future__ import annotations

import logging
import re
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, setup_globals
from hydra_plugins.hydra_joblib_launcher import _core

from rltool.errors import EXIT_PREEMPTED, RunStopped
from rltool.sweeps.jobs import _now, read_status, write_status

_log = logging.getLogger(__name__)

# hydra.launcher._target_ of hydra/launcher=joblib (Hydra loads launchers from hydra_plugins only)
TARGET = "hydra_plugins.rltool_launcher.OneProcessPerJob"


class OneProcessPerJob:
    """Hydra's joblib launcher (``hydra_plugins.rltool_launcher``, a ``JoblibLauncher``), with
    one loky executor per job (see the module)."""

    def launch(self, job_overrides, initial_job_idx: int) -> list[JobReturn]:
        setup_globals()
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        n_jobs = int(self.joblib.get("n_jobs") or 1)
        n_jobs = n_jobs if n_jobs > 0 else len(job_overrides)
        state = Singleton.get_state()
        stop = _SweepSignal()
        jobs = list(enumerate(job_overrides, start=initial_job_idx))
        with stop, ThreadPoolExecutor(max(1, min(n_jobs, len(jobs)))) as threads:
            futures = [
                threads.submit(self._one, idx, list(ov), state, sweep_dir, stop) for idx, ov in jobs
            ]
            runs = [f.result() for f in futures]
        if stop.signum is not None:
            name = signal.Signals(stop.signum).name
            raise RunStopped(
                f"{name}: the sweep stopped (its running jobs wrote checkpoints); the same "
                "command continues it",
                EXIT_PREEMPTED,
            )
        return runs

    def _one(self, idx: int, overrides: list[str], state: Any, sweep_dir: Path, stop) -> JobReturn:
        from joblib.externals.loky import ProcessPoolExecutor
        from joblib.externals.loky.process_executor import BrokenProcessPool

        ret = JobReturn(overrides=overrides, status=JobStatus.COMPLETED, _return_value=None)
        if stop.signum is not None:  # the sweep was stopped: no job starts after it
            return ret
        ex = ProcessPoolExecutor(max_workers=1)
        try:
            args = (idx, overrides, self.hydra_context, self.config, self.task_function, state)
            return ex.submit(_core.execute_job, *args).result()
        except BrokenProcessPool as e:  # its worker died: this job only
            _record_killed(sweep_dir, idx, overrides, _signal_of(e))
            return ret
        finally:
            ex.shutdown(wait=True, kill_workers=True)


def _signal_of(e: BaseException) -> str:
    """The signal that ended a loky worker, from loky's message ("exit codes ... {SIGKILL(-9)}")."""
    found = re.findall(r"SIG[A-Z0-9]+", str(e))
    return found[0] if found else "an unknown cause"


def _record_killed(sweep_dir: Path, idx: int, overrides: list[str], sig: str) -> None:
    why = (
        f"its process was killed by {sig}"
        + (" (kill -9, or the out-of-memory killer)" if sig == "SIGKILL" else "")
        + "; the same command resumes it from its latest checkpoint"
    )
    for path in sweep_dir.rglob("status.json"):
        st = read_status(path.parent) or {}
        if st.get("job_num") == idx and st.get("status") == "running":
            write_status(path.parent, status="failed", error=why, ended=_now())
    _log.error(f"rltool train: job {idx} ({' '.join(overrides)}) failed: {why}")


class _SweepSignal:
    """While a sweep runs: a SIGTERM / SIGINT to the launching process is noted (the workers,
    in its process group, got it too and checkpoint); no job starts after it."""

    def __init__(self):
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _SweepSignal:
        for s in (signal.SIGTERM, signal.SIGINT):
            self._old[s] = signal.signal(s, self._note)
        return self

    def __exit__(self, *exc) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)

    def _note(self, signum, _frame) -> None:
        if self.signum is None:  # print, not logging: a signal handler must not take its locks
            print(
                f"\nrltool train: {signal.Signals(signum).name}: stopping the sweep (its running "
                "jobs write checkpoints)",
                file=sys.stderr,
                flush=True,
            )
        self.signum = signum
