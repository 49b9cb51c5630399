"""``rltool tune <overrides> search=<space> trials=N [seeds=K] [objective=p10] [study=<dir>]``:
a hyperparameter search on Optuna (ask and tell), resumable, pruned on evaluations, scored on a
population of seeds.

Each trial's sampled values join the command's overrides and run as a sweep of ``rltool train
-m`` on the search seeds 200, 201, ... (``<study>/trial-<n>/<k>/``: the same composition,
checks, status files, locks and resume as any sweep; ``hydra/launcher=joblib`` runs the seeds in
parallel). ``parallel=P`` runs P trials at once, each sweep in its own process (tune/pool.py;
Optuna's TPE then counts running trials as bad, ``constant_liar``, so they spread out). The
trial's value is the objective's statistic of its seeds' final evals (rltool.sweeps.tune.objective).
One ``rltool tune`` process works on a study at a time: it holds the study folder's lock, and a
second one is refused with one line. Run the same command again after a kill: trials left
running resume from their checkpoints (done jobs are skipped), and the study ends with
``trials`` finished trials (completed, pruned or failed), never one twice. ``confirm=<n>`` runs
trial n's settings on the held-out population (seeds 100-119: ``population_seed0=``,
``population_seeds=``; the search seeds: ``seed0=``, ``seeds=``); ``export=<file>`` writes the best
trial's values as a ``conf/tuned/`` file. Exit status 1 when a trial failed (a job of its sweep
failed: recorded, the search goes on), as ``rltool train -m``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hydra import compose, initialize_config_dir

from rltool.cli import args
from rltool.cli.train import train_cmd
from rltool.config.store import conf_dir, register_configs, to_config
from rltool.errors import EXIT_JOB_FAILED, EXIT_OK, UserError
from rltool.runfolder import lock as runlock
from rltool.sweeps.tune import space as sp
from rltool.sweeps.tune import study as st
from rltool.sweeps.tune.objective import Objective
from rltool.sweeps.tune.runner import Runner

USAGE = "rltool tune <train overrides ...> search=<space> trials=N [key=value ...]"
ABOUT = (
    "A hyperparameter search: each trial's sampled values join the train overrides (every "
    "argument that is not one of these options goes to rltool train) and run on the search "
    "seeds seed0, seed0+1, ... (seeds of them); confirm=<trial> reruns a trial on the held-out "
    "population: population_seeds seeds from population_seed0, never searched."
)


def _opt(default, help_: str, **more):
    return field(default=default, metadata={"help": help_, **more})


@dataclass
class Options:
    """The command's own ``key=value`` arguments; every other argument goes to each trial."""

    search: str | None = _opt(
        None, "the search space: conf/search/<name>.yaml or a file", required=True
    )
    trials: int = _opt(0, "finished trials (completed, pruned or failed) the study ends with")
    seeds: int = _opt(1, f"search seeds per trial (1 to {st.MAX_SEEDS})")
    seed0: int = _opt(st.SEARCH_SEED0, "the first search seed: trials run seed0, seed0+1, ...")
    population_seed0: int = _opt(
        st.POPULATION[0], "the first seed of the held-out population (confirm=)"
    )
    population_seeds: int = _opt(len(st.POPULATION), "seeds of the held-out population")
    objective: str = _opt("mean", "the trial's value: mean, min, p10, median, max or count@G")
    study: str | None = _opt(None, "the study folder (null: multirun/tune/<search>)")
    pruner: str = _opt("median", "prune trials on their evaluations", choices=st.PRUNERS)
    pruner_startup: int = _opt(5, "trials that finish before the median pruner prunes")
    sampler_seed: int = _opt(0, "the TPE sampler's seed")
    random_trials: int = _opt(10, "TPE samples this many trials at random before it models them")
    confirm: int | None = _opt(None, "run this trial's settings on the held-out population")
    export: str | None = _opt(None, "write the best trial's values to this conf/tuned/ file")
    parallel: int = _opt(1, "trials at once, each in its own process")

    def __post_init__(self) -> None:
        if self.search is None:
            raise UserError(f"rltool tune needs search=<space>: one of {', '.join(sp.options())}")
        if self.confirm is None and self.trials < 1:
            raise UserError(f"trials={self.trials} is invalid: run at least 1 trial (trials=N)")
        if self.parallel < 1:
            raise UserError(f"parallel={self.parallel} is invalid: run at least 1 trial at once")
        if not 1 <= self.seeds <= st.MAX_SEEDS:
            raise UserError(f"seeds={self.seeds} is invalid: give 1 to {st.MAX_SEEDS} seeds")
        if self.population_seeds < 1:
            raise UserError(
                f"population_seeds={self.population_seeds} is invalid: give at least 1 seed"
            )
        self._refuse_overlap()
        Objective.parse(self.objective)

    def search_seeds(self) -> list[int]:
        return st.search_seeds(self.seeds, self.seed0)

    def population(self) -> list[int]:
        return st.population(self.population_seed0, self.population_seeds)

    def _refuse_overlap(self) -> None:
        """The population is held out: no search seed may be one of its seeds."""
        shared = set(self.search_seeds()) & set(self.population())
        if shared:
            raise UserError(
                f"the search seeds {_span(self.search_seeds())} and the held-out population "
                f"{_span(self.population())} share seed {min(shared)}: move seed0= or "
                "population_seed0= so that no searched seed is held out"
            )


def _span(seeds: list[int]) -> str:
    return f"{seeds[0]}-{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])


def parse(argv: list[str]) -> tuple[Options, list[str]]:
    """(the command's options, the overrides for the trials)."""
    opts, rest = args.parse(Options, argv, "tune", keep_others=True)
    for a in rest:
        if a.lstrip("+~").split("=", 1)[0] == "seed":
            raise UserError(
                f"{a}: a study sets the seeds itself (search seeds {_span(opts.search_seeds())}, "
                f"confirm on {_span(opts.population())}): give seeds=K and seed0=S"
            )
    return opts, rest


def own(overrides: list[str]) -> list[str]:
    """The job's overrides (Hydra's own, hydra/launcher=joblib, are the launcher's)."""
    return [o for o in overrides if not o.lstrip("+~").startswith("hydra")]


def compose_base(overrides: list[str]):
    """The composed config of the command's overrides, checked as rltool train checks it."""
    register_configs()
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        dcfg = compose("config", overrides=own(overrides))
    to_config(dcfg.copy())  # the same checks and one-line errors as a run
    return dcfg


def need_optuna() -> None:
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise UserError("rltool tune needs optuna: pip install 'rltool[tune]'") from None


def tune_cmd(argv: list[str]) -> int:
    if args.wants_help(argv):
        print(args.help_text(Options, USAGE, ABOUT))
        return EXIT_OK
    opts, overrides = parse(argv)
    need_optuna()
    space = sp.load(opts.search)
    dcfg = compose_base(overrides)
    added = sp.check_keys(space, dcfg, own(overrides))
    objective = Objective.parse(opts.objective)
    meta = st.Meta(
        opts.search,
        space.fingerprint(),
        str(objective),
        opts.seeds,
        opts.pruner,
        own(overrides),
        opts.seed0,
    )
    folder = Path(opts.study or f"multirun/tune/{Path(opts.search).stem}")
    if st.is_study(folder):
        meta.refuse_other(folder)
    elif opts.confirm is not None:
        raise UserError(
            f"confirm={opts.confirm}: {folder} holds no study yet: run the search first"
        )
    folder.mkdir(parents=True, exist_ok=True)
    with runlock.hold(folder):
        if not st.is_study(folder):
            meta.save(folder)
        study = st.open_study(folder, opts)
        runner = Runner(folder, study, space, dcfg, objective, opts, overrides, added, train_cmd)
        if opts.confirm is not None:
            runner.confirm(opts.confirm)
        else:
            runner.search()
        if opts.export:
            runner.export(Path(opts.export))
    return EXIT_JOB_FAILED if runner.failed else EXIT_OK
