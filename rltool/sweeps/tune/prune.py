"""Pruning a trial on its periodic evaluations, from inside its jobs.

A trial's sweep carries its settings in the Hydra callback entry :class:`ReportEvals`; each job
(in the tune process with the basic launcher, a worker with joblib) builds from them an eval hook
(:func:`job_hooks`) and passes it to ``train()`` (:class:`~rltool.run.hooks.Hooks`): it reports
every
periodic evaluation to the trial in the study's storage and asks the pruner. The job on the k-th
seed reports at step ``k * total_frames + frames``: every trial runs the same search seeds, so the
pruner compares a seed's curve with the other trials' curves of the same seed at the same frame.
A job the pruner stops raises :class:`~rltool.sweeps.jobs.JobPruned` (its status becomes
``pruned``);
the trial's other jobs stop at their next evaluation once one of them is pruned.
"""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import OmegaConf

from rltool.run.hooks import EvalHook, Hooks
from rltool.sweeps.jobs import JobPruned, read_status
from rltool.sweeps.tune.objective import FINAL
from rltool.sweeps.tune.study import PRUNED, STUDY_NAME, make_pruner, storage


class ReportEvals(Callback):
    """Hydra callback entry ``hydra.callbacks.tune_report`` of one trial's sweep. It does nothing
    as a callback: the entry carries the trial's pruning settings through the sweep's config (to
    joblib / submitit workers, to a parallel trial's process), and each job's task function
    turns them into its run's eval hook with :func:`job_hooks`."""

    def __init__(self, study: str, trial_id: int, pruner: str, startup: int):
        self.study, self.trial_id, self.pruner, self.startup = study, trial_id, pruner, startup
        self._trial = None  # the optuna trial, opened at the first report

    def __getstate__(self) -> dict:  # pickled with a job's hooks: no open storage
        return {**self.__dict__, "_trial": None}

    def hook(self, sweep_dir: Path, num: int, total_frames: int) -> EvalHook:
        """The eval hook of job ``num`` of the trial's sweep in ``sweep_dir``."""

        def report(run_dir: Path, row: dict) -> None:
            self._report(sweep_dir, num, num * total_frames + int(row["frames"]), row[FINAL])

        return report

    def _open(self):
        if self._trial is None:
            import optuna

            optuna.logging.set_verbosity(optuna.logging.WARNING)
            pruner = make_pruner(self.pruner, self.startup)
            study = optuna.load_study(
                study_name=STUDY_NAME, storage=storage(Path(self.study)), pruner=pruner
            )
            # optuna has no public handle on a trial another process asked for
            self._trial = optuna.trial.Trial(study, self.trial_id)
        return self._trial

    def _report(self, sweep_dir: Path, num: int, step: int, value: float) -> None:
        for other in sorted(p for p in sweep_dir.iterdir() if p.is_dir() and p.name.isdigit()):
            if other.name != str(num) and (read_status(other) or {}).get("status") == PRUNED:
                raise JobPruned(f"job {other.name} of this trial was pruned")
        trial = self._open()
        trial.report(float(value), step)
        if trial.should_prune():
            raise JobPruned(f"its evaluation {value:.1f} is below the pruner's bar (step {step})")


CALLBACK = "tune_report"  # the entry of hydra.callbacks that carries a trial's settings


def job_hooks(hydra_cfg, total_frames: int) -> Hooks:
    """The hooks of the running job (``hydra_cfg``: its Hydra config): the pruner's report when
    the sweep is a trial's (``hydra.callbacks.tune_report``), else none."""
    spec = OmegaConf.select(hydra_cfg, f"callbacks.{CALLBACK}")
    if spec is None:
        return Hooks()
    fields = {k: spec[k] for k in ("study", "trial_id", "pruner", "startup")}
    report = ReportEvals(**fields).hook(
        Path(hydra_cfg.sweep.dir), int(hydra_cfg.job.num), total_frames
    )
    return Hooks(on_eval=[report])
