"""Jobs and sweeps: a status file per job, skip-if-done on re-runs, a summary at the sweep's end.

Every run folder gets ``status.json``: ``{"status": "running" | "done" | "failed" |
"interrupted" | "pruned", "error": one line, "overrides": [...], ...}``. In a multirun a failing
job records its error and returns normally (no exception reaches the launcher, no ``sys.exit``),
so the other jobs go on whatever the launcher (a job stopped by ``rltool tune``'s pruner is
``pruned``); :class:`SweepSummary` (a Hydra callback, run in the launching
process) reads the status files at the end, prints one line, and the dispatcher exits non-zero
when a job failed.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hydra.experimental.callback import Callback

from rltool import runlock
from rltool.errors import EXIT_PREEMPTED, RunStopped, UserError, one_line
from rltool.layout import STATUS, RunFolder, has_checkpoint, interrupted_name


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
    """Atomically writes ``status.json``, updating what is there."""
    path = RunFolder(run_dir).status
    status = {**(read_status(run_dir) or {}), **fields}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(status, indent=2))
    os.replace(tmp, path)
    return status


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


# The preemption (SIGTERM / SIGINT) that stopped a job of this process. Hydra's launchers catch
# a job's exception and start the next job before re-raising it at the sweep's end, so the later
# jobs of the process check this and refuse to start.
_PREEMPTED: list[RunStopped] = []


def run_job(job: Job, fn: Callable[[bool], dict]) -> dict | None:
    """Runs ``fn(resume)`` (the training) under a status file. In a multirun: a job already done
    with the same overrides is skipped; one left running / interrupted / failed continues from its
    latest checkpoint (``resume=True``) or, without one, starts again; a failure is recorded and
    reported instead of raised, except a preemption (SIGTERM / SIGINT), which stops the sweep: no
    later job of the process starts (a re-run of the same command continues them all)."""
    if job.multirun and _PREEMPTED:
        print(
            f"rltool: job {job.num} ({' '.join(job.overrides)}): not started, the sweep was "
            "stopped",
            file=sys.stderr,
        )
        raise _PREEMPTED[0]
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
            return _fail(job, UserError(msg), keep_status=True)
        if prev.get("conflict"):
            write_status(job.run_dir, conflict=None)
        if prev.get("status") == "done":
            print(f"rltool: job {job.num} ({' '.join(job.overrides)}): done already, skipped")
            return _summary(job.run_dir)
        if has_checkpoint(job.run_dir):
            resume = True
        else:
            set_aside_metrics(job.run_dir)
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
        write_status(job.run_dir, status="pruned", error=None, ended=_now())
        print(f"rltool: job {job.num} ({' '.join(job.overrides)}): pruned ({e})")
        return None
    except RunStopped as e:
        if e.exit_code == 0:  # resumed at its budget: it had finished
            write_status(job.run_dir, status="done", ended=_now())
            if job.multirun:
                return _summary(job.run_dir)
            raise
        preempted = e.exit_code == EXIT_PREEMPTED
        write_status(
            job.run_dir,
            status="interrupted" if preempted else "failed",
            error=one_line(e),
            ended=_now(),
        )
        if preempted and job.multirun:
            _PREEMPTED.append(e)
        if preempted or not job.multirun:  # a signal stops the sweep too; a re-run resumes
            raise
        return _fail(job, e, keep_status=True)
    except Exception as e:  # noqa: BLE001 - recorded; a sweep goes on, a single run re-raises
        if not job.multirun:
            if isinstance(e, UserError):  # bad input (e.g. a resume refused): no trace on disk
                _put_back(status_path, before)
            else:
                write_status(job.run_dir, status="failed", error=one_line(e), ended=_now())
            raise
        return _fail(job, e)
    except BaseException as e:  # Ctrl-C, SystemExit (a preempted job): resumable on a re-run
        write_status(job.run_dir, status="interrupted", error=type(e).__name__, ended=_now())
        raise
    write_status(job.run_dir, status="done", ended=_now())
    return result


def _put_back(path: Path, content: bytes | None) -> None:
    if content is None:
        path.unlink(missing_ok=True)
    else:
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(content)
        os.replace(tmp, path)


def _fail(job: Job, e: Exception, keep_status: bool = False) -> None:
    msg = one_line(e)
    if not keep_status:
        write_status(job.run_dir, status="failed", error=msg, ended=_now())
    print(f"rltool train: job {job.num} ({' '.join(job.overrides)}) failed: {msg}", file=sys.stderr)
    if os.environ.get("RLTOOL_DEBUG") == "1":
        import traceback

        traceback.print_exception(e)
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


LAST_SWEEP: SweepResult | None = None  # set in the launching process, read by the dispatcher


def new_command() -> None:
    """Forgets the last sweep's result and preemption (one process may run several commands:
    ``rltool tune``, tests)."""
    global LAST_SWEEP
    LAST_SWEEP = None
    _PREEMPTED.clear()


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
    """Hydra callback: after a multirun, one line saying which jobs are done and which failed."""

    def on_multirun_end(self, config, **kwargs) -> None:
        global LAST_SWEEP
        LAST_SWEEP = sweep_result(Path(config.hydra.sweep.dir))
        print(LAST_SWEEP.line(), file=sys.stderr if LAST_SWEEP.failed else sys.stdout)
