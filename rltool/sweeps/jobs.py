"""Jobs and sweeps: a status file per job, skip-if-done on re-runs, a summary at the sweep's end.

Every run folder gets ``status.json``: ``{"status": "running" | "done" | "failed" |
"interrupted" | "pruned", "error": one line, "overrides": [...], ...}``. In a multirun a failing
job records its error and returns normally (no exception reaches the launcher, no ``sys.exit``),
so the other jobs go on whatever the launcher (a job stopped by ``rltool tune``'s pruner is
``pruned``); :class:`SweepSummary` (a Hydra callback, run in the launching
process) reads the status files at the end, prints one line, and the dispatcher exits non-zero
when a job failed. What one ``rltool train`` command's jobs and callbacks share (the sweep's
result, a preemption, --debug, the hooks) is one :class:`Command` object, never module state.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback

from rltool.console import STDOUT
from rltool.errors import EXIT_PREEMPTED, OSFault, RunStopped, UserError, one_line
from rltool.run.hooks import Hooks
from rltool.runfolder import lock as runlock
from rltool.runfolder.layout import STATUS, RunFolder, has_checkpoint, interrupted_name
from rltool.runfolder.writes import atomic_write, os_fault, write_text
from rltool.testing import faults

_log = logging.getLogger(__name__)


class JobPruned(Exception):
    """Raised inside a job by a pruner (``rltool tune``): its status becomes ``pruned``, neither
    done nor failed, and the sweep goes on."""


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")


def read_status(run_dir: Path) -> dict | None:
    try:
        return json.loads(RunFolder(run_dir).status.read_text())
    except (OSError, ValueError):
        return None


def write_status(run_dir: Path, **fields) -> dict:
    """Atomically writes ``status.json``, updating what is there. When the OS refuses (a full
    disk), how the run ended is written in place instead, if it fits the file's own blocks; else
    the :class:`~rltool.errors.OSFault` is raised and the file stays the last complete one."""
    path = RunFolder(run_dir).status
    status = {**(read_status(run_dir) or {}), **fields}
    try:
        write_text(path, json.dumps(status, indent=2))
    except OSFault:
        if status.get("status") == "running" or not _in_place(path, status):
            raise
    return status


def _in_place(path: Path, status: dict) -> bool:
    """Writes ``status`` over ``path`` in place when it fits the blocks the file holds already
    (a full disk then needs no new one); False when it does not fit or cannot be opened."""
    data = json.dumps(status).encode()
    try:
        with open(path, "r+b") as f:
            if len(data) > os.fstat(f.fileno()).st_blocks * 512:
                return False
            f.write(data)
            f.truncate()
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        return False
    return True


def _record_end(run_dir: Path, **fields) -> None:
    """How the run ended, written when the OS allows: the error being reported matters more
    than a status file the disk has no room for."""
    with suppress(OSFault):
        write_status(run_dir, **fields)


def set_aside_metrics(run_dir: Path) -> None:
    """An unfinished job without a checkpoint starts again from scratch: its old metrics are kept
    aside as ``<metrics file>.interrupted-<n>`` (never deleted) so the new file starts clean. The
    metrics file is the one the old attempt's ``config.yaml`` names (``logger.csv.filename``)."""
    old = RunFolder(run_dir).metrics
    if old.exists():
        n = 1
        while old.with_name(interrupted_name(old.name, n)).exists():
            n += 1
        old.rename(old.with_name(interrupted_name(old.name, n)))


@dataclass
class Job:
    run_dir: Path
    multirun: bool
    overrides: list[str]
    num: int | None


def current_job() -> Job:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    multirun = hc.mode == RunMode.MULTIRUN
    return Job(
        Path(hc.runtime.output_dir),
        multirun,
        list(hc.overrides.task),
        hc.job.num if multirun else None,
    )


@dataclass
class Command:
    """One ``rltool train`` command's state. ``train_cmd`` makes it; the task function hands it to
    each job (it travels, pickled, with the task function to joblib / submitit workers: a worker's
    jobs each get a copy); the command's Hydra callbacks find it with :func:`current`, since Hydra
    instantiates them from ``conf/config.yaml`` and cannot hand them an object. That is the one
    process-level handle, set only inside :meth:`running`, so nothing outlives the command."""

    debug: bool = False  # a failed job of a sweep prints its traceback too (--debug)
    hooks: Hooks = field(default_factory=Hooks)  # passed to every job's train()
    # the preemption (SIGTERM / SIGINT) that stopped a job: Hydra's launchers catch a job's
    # exception and start the next job before re-raising it, so later jobs check this
    preempted: RunStopped | None = None
    result: SweepResult | None = None  # the sweep's statuses, from SweepSummary at its end
    before: Any = None  # a single run's folder before it (rltool.runfolder.tidy.Before)
    # the output folder the OS would refuse (a UserError, raised when Hydra's mkdir fails) and
    # the highest of its folders that did not exist (removed then, when empty)
    refusal: Any = None
    new_top: Any = None
    # the launching process: a job in another one (a joblib / submitit worker) that a signal to
    # its own process stopped is recorded interrupted and the sweep goes on
    pid: int = field(default_factory=os.getpid)

    @contextmanager
    def running(self) -> Iterator[Command]:
        """This command is the one :func:`current` finds inside the block."""
        _RUNNING.append(self)
        try:
            yield self
        finally:
            _RUNNING.remove(self)


_RUNNING: list[Command] = []  # see Command: only Command.running changes it


def current() -> Command | None:
    """The ``rltool train`` command running in this process (None in a job's worker process)."""
    return _RUNNING[-1] if _RUNNING else None


def run_job(job: Job, fn: Callable[[bool], dict], command: Command | None = None) -> dict | None:
    """Runs ``fn(resume)`` (the training) under a status file. In a multirun: a job already done
    with the same overrides is skipped; one left running / interrupted / failed continues from its
    latest checkpoint (``resume=True``) or, without one, starts again; a failure is recorded and
    reported instead of raised, except a preemption (SIGTERM / SIGINT), which stops the sweep: no
    later job of ``command`` starts (a re-run of the same command continues them all)."""
    command = command or Command()
    if job.multirun and command.preempted is not None:
        _log.warning(
            f"rltool: job {job.num} ({' '.join(job.overrides)}): not started, the sweep was stopped"
        )
        raise command.preempted
    prev, resume = read_status(job.run_dir), False
    status_path = RunFolder(job.run_dir).status
    before = status_path.read_bytes() if status_path.exists() else None
    if job.multirun and prev is not None:
        if prev.get("overrides") != job.overrides:
            # the folder's own record stays; the conflict is noted beside it for the summary
            msg = (
                f"{job.run_dir} holds a job with other overrides {prev.get('overrides')}: "
                "sweep into a fresh hydra.sweep.dir"
            )
            write_status(job.run_dir, conflict=msg)
            return _fail(job, UserError(msg), command.debug, keep_status=True)
        if prev.get("conflict"):
            write_status(job.run_dir, conflict=None)
        if prev.get("status") == "done":
            _log.info(
                f"rltool: job {job.num} ({' '.join(job.overrides)}): done already, skipped",
                extra=STDOUT,
            )
            return _summary(job.run_dir)
        if has_checkpoint(job.run_dir):
            resume = True
        else:
            set_aside_metrics(job.run_dir)
    faults.job = job.num
    write_status(
        job.run_dir,
        status="running",
        error=None,
        overrides=job.overrides,
        job_num=job.num,
        host=socket.gethostname(),
        pid=os.getpid(),
        started=_now(),
        ended=None,
    )
    try:
        result = fn(resume)
    except JobPruned as e:
        _record_end(job.run_dir, status="pruned", error=None, ended=_now())
        _log.info(f"rltool: job {job.num} ({' '.join(job.overrides)}): pruned ({e})", extra=STDOUT)
        return None
    except RunStopped as e:
        preempted = e.exit_code == EXIT_PREEMPTED
        _record_end(
            job.run_dir,
            status="interrupted" if preempted else "failed",
            error=one_line(e),
            ended=_now(),
        )
        if preempted and job.multirun and os.getpid() != command.pid:
            # a worker process of its own: the signal stopped this job, not the sweep (a signal
            # to the sweep reaches its launching process too, which stops it)
            _log.warning(
                f"rltool train: job {job.num} ({' '.join(job.overrides)}): interrupted ({e}); "
                "the sweep goes on, the same command resumes it"
            )
            return None
        if preempted and job.multirun:
            command.preempted = e
        if preempted or not job.multirun:  # a signal stops the sweep too; a re-run resumes
            raise
        return _fail(job, e, command.debug, keep_status=True)
    except Exception as e:  # noqa: BLE001 - recorded; a sweep goes on, a single run re-raises
        if not job.multirun:
            if isinstance(e, UserError):  # bad input (e.g. a resume refused): no trace on disk
                _put_back(status_path, before)
            else:
                _record_end(job.run_dir, status="failed", error=_why(e), ended=_now())
            raise
        return _fail(job, e, command.debug)
    except BaseException as e:  # Ctrl-C, SystemExit (a preempted job): resumable on a re-run
        _record_end(job.run_dir, status="interrupted", error=type(e).__name__, ended=_now())
        raise
    write_status(job.run_dir, status="done", ended=_now())
    return result


def _why(e: BaseException) -> str:
    """The one line recorded for a failed job (an OS refusal named as such)."""
    return one_line(os_fault(e) or e)


def _put_back(path: Path, content: bytes | None) -> None:
    if content is None:
        path.unlink(missing_ok=True)
    else:
        atomic_write(path, lambda f: f.write(content))


def _fail(job: Job, e: Exception, debug: bool, keep_status: bool = False) -> None:
    msg = _why(e)
    if not keep_status:
        _record_end(job.run_dir, status="failed", error=msg, ended=_now())
    _log.error(  # with --debug, the traceback after the line
        f"rltool train: job {job.num} ({' '.join(job.overrides)}) failed: {msg}",
        exc_info=e if debug else None,
    )
    return None


def _summary(run_dir: Path) -> dict | None:
    try:
        return json.loads(RunFolder(run_dir).summary.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class SweepResult:
    sweep_dir: Path
    done: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (job, error)
    other: list[tuple[str, str]] = field(default_factory=list)  # (job, status)
    # jobs another live process holds (its lock): skipped here, neither done nor failed
    elsewhere: list[str] = field(default_factory=list)

    def line(self) -> str:
        parts = [f"{len(self.done)} done"]
        if self.elsewhere:
            parts.append(
                f"{len(self.elsewhere)} running elsewhere (skipped: {', '.join(self.elsewhere)})"
            )
        if self.failed:
            parts.append(
                f"{len(self.failed)} failed: " + "; ".join(f"{j} ({e})" for j, e in self.failed)
            )
        if self.other:
            parts.append(", ".join(f"{j} {s}" for j, s in self.other))
        return f"rltool train: sweep {self.sweep_dir}: " + ", ".join(parts)


def sweep_result(sweep_dir: Path) -> SweepResult:
    res = SweepResult(Path(sweep_dir))
    for path in sorted(Path(sweep_dir).rglob(STATUS), key=lambda p: _job_key(sweep_dir, p)):
        if ".submitit" in path.parts:
            continue
        st = read_status(path.parent) or {}
        name = f"job {st.get('job_num', path.parent.name)}"
        if st.get("conflict"):
            res.failed.append((name, st["conflict"]))
        elif st.get("status") == "done":
            res.done.append(name)
        elif st.get("status") == "failed":
            res.failed.append((name, st.get("error") or "unknown error"))
        elif st.get("status") == "running" and runlock.held_elsewhere(path.parent):
            res.elsewhere.append(name)
        else:
            res.other.append((name, st.get("status", "unreadable")))
    return res


def _job_key(sweep_dir, path: Path):
    rel = path.parent.relative_to(sweep_dir).parts
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in rel]


class SweepSummary(Callback):
    """Hydra callback: after a multirun, one line saying which jobs are done and which failed;
    the result goes to the running :class:`Command` (its exit status)."""

    def on_multirun_end(self, config, **kwargs) -> None:
        result = sweep_result(Path(config.hydra.sweep.dir))
        if result.failed:
            _log.error(result.line())
        else:
            _log.info(result.line(), extra=STDOUT)
        command = current()
        if command is not None:
            command.result = result
