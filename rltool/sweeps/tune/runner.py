"""The trials of ``rltool tune`` (the command: :mod:`rltool.cli.tune`): each one a sweep of
``rltool train -m`` over its seeds, told to the Optuna study from its jobs' status files."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from pathlib import Path

from omegaconf import OmegaConf

from rltool.analysis.results import find_runs, group_runs
from rltool.analysis.tables import format_table, rows
from rltool.console import STDOUT
from rltool.errors import EXIT_PREEMPTED, RunStopped, UserError
from rltool.sweeps.tune import space as sp
from rltool.sweeps.tune import study as st
from rltool.sweeps.tune.pool import Pool

_log = logging.getLogger(__name__)

CALLBACK = "hydra.callbacks.tune_report"


class Runner:
    """One ``rltool tune`` command's study: its search, a confirmation, the export.

    ``train`` runs ``rltool train <argv>`` in this process (the command's ``train_cmd``: a trial
    is that command's sweep, so the library takes it as an argument rather than import it).
    """

    def __init__(
        self,
        folder: Path,
        study,
        space,
        dcfg,
        objective,
        opts,
        overrides,
        added,
        train: Callable[[list[str]], int],
    ):
        self.folder, self.study, self.space, self.dcfg = Path(folder), study, space, dcfg
        self.train = train
        self.objective, self.opts, self.overrides = objective, opts, overrides
        self.added = added  # searched keys new to the config (env.kwargs.<name>): added with ++
        self.failed = 0  # trials this command recorded failed

    # ---- the search ----
    def search(self) -> None:
        """Trials left running by a killed command first (resumed), then new ones until
        ``trials`` have finished; ``parallel`` of them at once."""
        if self.opts.parallel > 1:
            self._search_parallel()
        else:
            for number, trial_id, values in self._left_running():
                self._run(number, trial_id, values)
            while self._finished() < self.opts.trials:
                self._run(*self._ask())
        _log.info(
            f"rltool tune: study {self.folder}: {self._counts()}; {st.best_line(self.study)}; "
            f"next: rltool report {self.folder} | rltool plot {self.folder}",
            extra=STDOUT,
        )

    def _left_running(self) -> list[tuple[int, int, dict]]:
        """(number, trial id, values) of the trials a killed command left running."""
        from optuna.trial import Trial, TrialState

        out = []
        for t in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            _log.info(f"rltool tune: trial {t.number}: continuing (left unfinished)", extra=STDOUT)
            # sampling again returns the stored values (and draws any a kill left unsampled);
            # optuna has no public handle on a stored trial's id
            trial = Trial(self.study, t._trial_id)
            out.append((t.number, t._trial_id, sp.sample(self.space, trial, self.dcfg)))
        return out

    def _ask(self) -> tuple[int, int, dict]:
        trial = self.study.ask()
        return trial.number, trial._trial_id, sp.sample(self.space, trial, self.dcfg)

    def _search_parallel(self) -> None:
        """Up to ``parallel`` trials at once, each a ``rltool train -m`` process (tune/pool.py)."""
        queue, values = self._left_running(), {}
        with Pool(self.folder / "logs") as pool:
            while True:
                while len(pool.procs) < self.opts.parallel and pool.stop_signal is None:
                    if queue:
                        number, trial_id, values[number] = queue.pop(0)
                    elif self._finished() + len(pool.procs) < self.opts.trials:
                        number, trial_id, values[number] = self._ask()
                    else:
                        break
                    self._start(pool, number, trial_id, values[number])
                if not pool.procs:
                    break
                number, code = pool.wait_any()
                outcome = self._outcome(number)
                if outcome[0] is not None:
                    self._tell(number, values[number], outcome)
                elif pool.stop_signal is None and code != EXIT_PREEMPTED:
                    raise UserError(
                        f"trial {number}: {pool.last_line(number) or f'exit status {code}'} "
                        f"(log: {pool.log(number)})"
                    )
        if pool.stop_signal is not None:
            raise RunStopped(
                f"stopped ({signal.Signals(pool.stop_signal).name}), the running trials "
                "checkpointed: run the same rltool tune command again to continue the study",
                EXIT_PREEMPTED,
            )

    def _start(self, pool: Pool, number: int, trial_id: int, values: dict) -> None:
        """Trial ``number``'s sweep as a process of ``pool``; told at once if it already ended
        (a kill came before the last command could tell it)."""
        outcome = self._outcome(number)
        if outcome[0] is not None:
            self._tell(number, values, outcome)
            return
        pool.start(number, ["train", *self._trial_argv(number, trial_id, values)])
        _log.info(f"rltool tune: trial {number}: started (log: {pool.log(number)})", extra=STDOUT)

    def _finished(self) -> int:
        return sum(t.state.is_finished() for t in self.study.get_trials(deepcopy=False))

    def _counts(self) -> str:
        counts: dict[str, int] = {}
        for t in self.study.get_trials(deepcopy=False):
            counts[t.state.name.lower()] = counts.get(t.state.name.lower(), 0) + 1
        return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))

    def trial_overrides(self, params: dict) -> list[str]:
        """The sampled values as overrides, in the space's order (the same text on a resume)."""
        return sp.overrides({k: params[k] for k in self.space.params if k in params}, self.added)

    def _sweep_argv(self, folder: Path, seeds: list[int], values: dict, extra: list[str]):
        """``rltool train`` arguments of a sweep of ``values`` over ``seeds`` into ``folder``."""
        return [
            "-m",
            *self.overrides,
            *self.trial_overrides(values),
            f"seed={','.join(map(str, seeds))}",
            f"hydra.sweep.dir={folder.resolve()}",
            *extra,
        ]

    def _trial_argv(self, number: int, trial_id: int, values: dict) -> list[str]:
        """Trial ``number``'s sweep: its folder, the search seeds, the pruning callback."""
        folder, seeds = st.trial_dir(self.folder, number), self.opts.search_seeds()
        return self._sweep_argv(folder, seeds, values, self._callback(trial_id))

    def _callback(self, trial_id: int) -> list[str]:
        if self.opts.pruner == "none":
            return []
        target = "rltool.sweeps.tune.prune.ReportEvals"
        fields = {
            "_target_": target,
            "study": str(self.folder.resolve()),
            "trial_id": trial_id,
            "pruner": self.opts.pruner,
            "startup": self.opts.pruner_startup,
        }
        return [f"+{CALLBACK}.{k}={v}" for k, v in fields.items()]

    def _run(self, number: int, trial_id: int, values: dict) -> None:
        """Trial ``number``'s sweep in this process, then told."""
        if self._outcome(number)[0] is None:  # not run, or left unfinished: resumed or skipped
            try:
                self.train(self._trial_argv(number, trial_id, values))
            except RunStopped as e:  # a signal: the trial stays running, resumable
                raise RunStopped(
                    f"trial {number} stopped ({str(e).split(';')[0]}): run the same rltool tune "
                    "command again to continue the study",
                    e.exit_code,
                ) from None
        self._tell(number, values, self._outcome(number))

    def _outcome(self, number: int) -> tuple[str | None, float, str]:
        return st.outcome(st.trial_dir(self.folder, number), self.opts.seeds, self.objective)

    def _tell(self, number: int, values: dict, outcome: tuple[str | None, float, str]) -> None:
        """Tells the study how trial ``number`` ended (``outcome``: from its jobs' statuses)."""
        from optuna.trial import TrialState

        state, value, why = outcome
        shown = " ".join(self.trial_overrides(values))
        if state == st.DONE:
            self.study.tell(number, value)
            _log.info(
                f"rltool tune: trial {number}: {self.objective} {value:g} ({shown})", extra=STDOUT
            )
        elif state == st.PRUNED:
            self.study.tell(number, state=TrialState.PRUNED)
            _log.info(f"rltool tune: trial {number}: pruned ({shown})", extra=STDOUT)
        else:
            self.failed += 1
            self.study.tell(number, state=TrialState.FAIL)
            _log.warning(
                f"rltool tune: trial {number}: failed: {why or 'unfinished'} ({shown})",
                extra=STDOUT,
            )

    # ---- after the search ----
    def _trial(self, number: int):
        from optuna.trial import TrialState

        for t in self.study.get_trials(deepcopy=False):
            if t.number == number and t.state == TrialState.COMPLETE:
                return t
        raise UserError(
            f"trial {number} is not a completed trial of {self.folder}: see rltool report "
            f"{self.folder}"
        )

    def confirm(self, number: int) -> None:
        """Trial ``number``'s settings on the held-out population (``population_seed0=``,
        ``population_seeds=``)."""
        t = self._trial(number)
        folder = st.confirm_dir(self.folder, number)
        population = self.opts.population()
        self.train(self._sweep_argv(folder, population, t.params, []))
        runs = find_runs([str(folder)])
        settings = group_runs(runs)
        for s in settings:  # one row; its name would be every sampled value, hundreds of columns
            s.name = f"trial {number}"
        _log.info(format_table(rows(settings, self.objective.goal)), extra=STDOUT)
        # as the sweep ran them: the line pastes back as overrides of rltool train
        _log.info(f"trial {number}: " + " ".join(self.trial_overrides(t.params)), extra=STDOUT)
        _log.info(
            f"rltool tune: trial {number} on the held-out seeds {population[0]}-"
            f"{population[-1]}: {self.objective} {self.objective.of_runs(runs):g} (search: "
            f"{t.value:g} on seeds {self._seeds()})",
            extra=STDOUT,
        )

    def _seeds(self) -> str:
        seeds = self.opts.search_seeds()
        return f"{seeds[0]}-{seeds[-1]}"

    def export(self, path: Path) -> None:
        """The best trial's values as a ``conf/tuned/`` file (applied last, as ``tuned`` is)."""
        best = st.best_trial(self.study)
        if best is None:
            raise UserError(f"export={path}: {self.folder} has no completed trial yet")
        values = {k: best.params[k] for k in self.space.params if k in best.params}
        body = OmegaConf.to_yaml(st.nest(values))
        head = (
            f"# @package _global_\n# rltool tune: trial {best.number} of {self.folder} "
            f"(search={self.opts.search}, {self.objective} {best.value:g} on seeds "
            f"{self._seeds()}); confirm it on the "
            f"population before shipping: rltool tune ... confirm={best.number}\n"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(head + body)
        _log.info(f"rltool tune: trial {best.number}'s settings -> {path}", extra=STDOUT)
