"""Pruning a trial on its periodic evaluations, from inside its jobs.

A trial's sweep carries the Hydra callback :class:`ReportEvals`; in each job's process (the tune
process with the basic launcher, a worker with joblib) it adds a hook to the training loop
(:data:`rltool.train.EVAL_HOOKS`) that reports every periodic evaluation to the trial in the
study's storage and asks the pruner. The job on the k-th seed reports at step
``k * total_frames + frames``: every trial runs the same search seeds, so the pruner compares a
seed's curve with the other trials' curves of the same seed at the same frame. A job the pruner
stops raises :class:`~rltool.sweep.JobPruned` (its status becomes ``pruned``); the trial's other
jobs stop at their next evaluation once one of them is pruned.
"""

from __future__ import annotations

from pathlib import Path

from hydra.experimental.callback import Callback

from rltool.sweep import JobPruned, read_status
from rltool.tune.objective import FINAL
from rltool.tune.study import PRUNED, STUDY_NAME, make_pruner, storage


class ReportEvals(Callback):
    """Hydra callback (``hydra.callbacks.tune_report``) of one trial's sweep."""

    def __init__(self, study: str, trial_id: int, pruner: str, startup: int):
        self.study, self.trial_id, self.pruner, self.startup = study, trial_id, pruner, startup
        self._hook = None
        self._trial = None  # the optuna trial, opened at the first report

    def on_job_start(self, config, **kwargs) -> None:
        from rltool import train

        sweep_dir, num = Path(str(config.hydra.sweep.dir)), int(config.hydra.job.num)
        total = int(config.total_frames)

        def hook(run_dir: Path, row: dict) -> None:
            self._report(sweep_dir, num, num * total + int(row["frames"]), row[FINAL])

        self._hook = hook
        train.EVAL_HOOKS.append(hook)

    def on_job_end(self, config, job_return, **kwargs) -> None:
        from rltool import train

        if self._hook in train.EVAL_HOOKS:
            train.EVAL_HOOKS.remove(self._hook)
        self._hook = None

    def __getstate__(self) -> dict:  # sent to joblib's workers: no hook, no open storage
        return {**self.__dict__, "_hook": None, "_trial": None}

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
