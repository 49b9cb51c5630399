"""``rltool train [overrides] [-m]``: the Hydra app (compose, validate, run one job or a sweep).

Each job holds its run folder's lock (:mod:`rltool.runfolder.lock`) while it writes there; a resume
or an
existing ``hydra.run.dir`` is locked before Hydra starts. A refused command (bad input, exit 2)
leaves nothing behind: Hydra creates the run folder (and ``.hydra/``, ``train.log``) before the
config is checked, so :class:`RunStart` records what was there first and :func:`train_cmd`
removes what this process added: the whole folder when it is new, only the new entries of a
folder that existed (a refused resume leaves its folder as it was).

One command's state (that record, the sweep's result, a preemption, --debug, the hooks) is one
:class:`~rltool.sweeps.jobs.Command` that :func:`train_cmd` makes and hands to its jobs (the task
function :class:`TrainJob`) and its callbacks (:func:`rltool.sweeps.jobs.current`). The app runs on
the
argument list it is given (:mod:`rltool.cli.hydra_app`): no ``sys.argv``, no ``os.environ``.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shlex
import shutil
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rltool.cli import hydra_app, launch, sweep_plan
from rltool.cli.resume_argv import check_no_schema, path_value, resume_args
from rltool.config.store import conf_dir, register_configs, to_config
from rltool.console import STDOUT, cli_output
from rltool.distributed import launcher
from rltool.distributed.environ import worker_rank
from rltool.errors import EXIT_JOB_FAILED, EXIT_OK
from rltool.run.hooks import Hooks
from rltool.runfolder import lock as runlock
from rltool.runfolder.layout import RunFolder
from rltool.runfolder.lock import RunLocked
from rltool.runfolder.tidy import Before, folder_refusal, new_folders, remove_empty
from rltool.sweeps import jobs as sweep
from rltool.sweeps.jobs import Command, current_job, run_job

register_configs()
_log = logging.getLogger(__name__)


class RunStart(Callback):
    """Hydra callback: records a single run's folder before Hydra creates it, in the running
    command's :class:`~rltool.runfolder.tidy.Before`; notes why the OS would refuse to make the
    run's or the sweep's folder (a file of that name, a name too long): Hydra swallows a
    callback's exception, so :func:`train_cmd` raises it when Hydra's ``mkdir`` fails."""

    def on_run_start(self, config, **kwargs) -> None:
        command = sweep.current()
        if command is None or _refuses(command, "hydra.run.dir", config.hydra.run.dir):
            return
        if command.before is not None:
            command.before.record(Path(str(config.hydra.run.dir)))

    def on_multirun_start(self, config, **kwargs) -> None:
        command = sweep.current()
        if command is not None:
            _refuses(command, "hydra.sweep.dir", config.hydra.sweep.dir)


def _refuses(command: Command, key: str, value) -> bool:
    path = Path(str(value))
    command.refusal = folder_refusal(key, path)
    command.new_top = new_folders(path) if command.refusal is not None else None
    return command.refusal is not None


@dataclasses.dataclass
class TrainJob:
    """The Hydra task function of one command: a job's config -> its training."""

    command: Command

    def __call__(self, dcfg: DictConfig) -> float | None:
        with cli_output():  # a launcher's worker process (joblib) shows the lines too
            return train_job(dcfg, self.command)


def train_job(dcfg: DictConfig, command: Command) -> float | None:
    """One job of ``command``: its lock, status file, training and last line."""
    from hydra.core.hydra_config import HydraConfig

    from rltool.sweeps.tune.prune import job_hooks
    from rltool.train import train  # torch and friends load only once the config is valid

    job = current_job()
    comm = _join(dcfg)
    hooks = command.hooks + job_hooks(HydraConfig.get(), int(dcfg.total_frames))
    if comm.rank != 0:  # trains in rank 0's folder and writes nothing
        try:
            train(to_config(dcfg), Path(comm.share(None)), comm, hooks)
        finally:
            comm.close()
        return None
    try:
        took = runlock.acquire(job.run_dir)  # before status.json, config.yaml or metrics
    except RunLocked as e:
        if not job.multirun:
            raise
        _log.warning(
            f"rltool train: job {job.num} ({' '.join(job.overrides)}): skipped, another live "
            f"process holds it ({e.holder})"
        )
        return None
    comm.share(str(job.run_dir))  # rank 0 holds the folder: the other ranks may start
    launcher.report(run_dir=str(job.run_dir))
    trained = []

    def fit(resume: bool) -> dict:
        cfg = to_config(dcfg)
        if resume:  # an interrupted multirun job continues from its latest checkpoint
            cfg = dataclasses.replace(cfg, resume=str(job.run_dir))
        out = train(cfg, job.run_dir, comm, hooks)
        trained.append(True)
        return out

    try:
        summary = run_job(
            job, fit, command
        )  # status.json; in a sweep: skip done, resume, record failures
        if summary is not None and trained:
            _end_line(job, summary)
    except BaseException as e:
        if not job.multirun and _refused(e):
            command.before.tidy()  # holding the lock
        raise
    finally:
        comm.close()
        if took:
            runlock.release(job.run_dir)
    return (summary or {}).get("eval/return_mean")


def _join(dcfg: DictConfig):
    """This process's place in the run: :data:`~rltool.distributed.ranks.SOLO`, or its rank of a
    distributed run (torchrun, Slurm, :func:`~rltool.distributed.launcher.launch`)."""
    from rltool.distributed import ranks as distributed

    if worker_rank() is None:
        return distributed.SOLO
    return distributed.join(to_config(dcfg))  # in a sweep: each task of a submitit job a rank


def _shown(path: Path) -> str:
    rel = os.path.relpath(path)
    return path.as_posix() if rel.startswith("..") else rel


def _duration(s: float) -> str:
    s = round(s)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def end_line(run_dir: Path, summary: dict) -> str:
    """The run's last line: where it went, how it ended, what to run next (commands that work
    pasted into a shell: the folder quoted when it must be)."""
    d = _shown(Path(run_dir))
    ret = summary.get("eval/return_mean")
    ev = "-" if ret is None else f"{ret:.1f}"
    return (
        f"rltool train: {d}: final eval {ev} (eval/return_mean), {summary.get('frames', 0):,} "
        f"frames, {_duration(summary.get('wall_time_s', 0.0))}; next: rltool eval "
        f"{shlex.quote(f'run={d}')} | rltool train {shlex.quote(f'resume={d}')} "
        "total_frames=<more>"
    )


def _end_line(job, summary: dict) -> None:
    line = end_line(job.run_dir, summary)
    if job.multirun:
        line = line.replace("rltool train:", f"rltool train: job {job.num}:", 1)
    _log.info(line, extra=STDOUT)
    try:  # Hydra's job log, otherwise empty (rltool's lines do not reach Hydra's handlers)
        with RunFolder(job.run_dir).log.open("a") as f:
            f.write(line + "\n")
    except OSError:
        pass


_NO_RUN = ("--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--resolve")
_MULTI = ("-m", "--multirun")


def _shutdown_s(args: list[str]) -> float:
    """How long the launcher lets the ranks finish an update and write a checkpoint after a
    signal: distributed.timeout_s (given, else 60) plus 30 s."""
    given = [a.split("=", 1)[1] for a in args if a.startswith("distributed.timeout_s=")]
    return float(given[-1] if given else 60) + 30


def _target(args: list[str]) -> Path | None:
    """The run folder a single run will write, when it exists already (a resume, an explicit
    hydra.run.dir): locked before Hydra writes anything there."""
    if any(a.split("=", 1)[0] in _NO_RUN + _MULTI for a in args):
        return None
    dirs = [path_value(a.split("=", 1)[1]) for a in args if a.startswith("hydra.run.dir=")]
    try:
        if not dirs or not Path(dirs[-1]).is_dir():
            return None
    except OSError:  # a name too long: RunStart refuses it
        return None
    return Path(dirs[-1]).resolve()


def _check_folders(args: list[str]) -> None:
    """A literal ``hydra.run.dir`` / ``hydra.sweep.dir`` the OS would refuse (or an empty one,
    which Hydra takes as the working folder) is refused before Hydra starts; one with an
    interpolation is checked once composed (:class:`RunStart`)."""
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key in ("hydra.run.dir", "hydra.sweep.dir") and "${" not in value:
            refusal = folder_refusal(key, path_value(value))
            if refusal is not None:
                raise refusal


def _one_process_per_job(args: list[str]) -> list[str]:
    """``hydra/launcher=joblib`` runs on :mod:`rltool.sweeps.launcher` (a worker's loss costs its
    own job only, not the sweep)."""
    if any(a.lstrip("+") == "hydra/launcher=joblib" for a in args):
        from rltool.sweeps.launcher import TARGET

        return [*args, f"hydra.launcher._target_={TARGET}"]
    return args


def _refused(exc: BaseException) -> bool:
    from rltool.cli import _bad_input

    return isinstance(exc, Exception) and _bad_input(exc) and not isinstance(exc, RunLocked)


def train_cmd(argv: list[str], debug: bool = False, hooks: Hooks | None = None) -> int:
    """``rltool train``; after a sweep, exit status 1 (EXIT_JOB_FAILED) if a job failed.
    ``resume=<run_dir>`` becomes Hydra arguments that compose the run's saved config first.
    ``debug``: a sweep's failed jobs print their tracebacks, the ranks run with --debug;
    ``hooks``: passed to every job's ``train()``."""
    check_no_schema(argv)
    if sweep_plan.wants_plan(argv):  # -m with --cfg: list the sweep's jobs, run none
        lines = sweep_plan.plan(argv)
        print("\n".join([*lines, f"rltool train: {len(lines)} job(s), none run (--cfg)"]))
        return EXIT_OK
    _check_folders(argv)
    args = _one_process_per_job(resume_args(argv))
    rank = worker_rank()
    shows = any(a.split("=", 1)[0] in _NO_RUN for a in args)  # --cfg job, --help: no ranks
    if rank is None and not shows and (n := launch.nproc(args)) > 1:
        return launcher.launch(argv, n, shutdown_s=_shutdown_s(args), debug=debug)
    scratch = None
    if rank:  # ranks > 0 write nothing (rank 0 shares its run folder)
        args, scratch = launch.follower_args(args)
    command = Command(debug=debug, hooks=hooks or Hooks(), before=Before())
    target = _target(args) if not rank else None
    took = False
    try:
        with command.running():  # its callbacks find it; gone when the command ends
            if target is not None:
                command.before.record(target)
                took = runlock.acquire(target)
            hydra_app.run_app(args, TrainJob(command), conf_dir(), "config", task_name="train")
    except BaseException as e:
        if command.refusal is not None and isinstance(e, OSError):  # Hydra's mkdir of it
            remove_empty(command.new_top)
            raise command.refusal from None
        if _refused(e):
            command.before.tidy()
        raise
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        if took:
            runlock.release(target)
    result = command.result
    return EXIT_JOB_FAILED if result is not None and (result.failed or result.other) else EXIT_OK
