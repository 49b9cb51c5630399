"""``rltool tune <overrides> search=<space> trials=N [seeds=K] [objective=p10] [study=<dir>]``:
a hyperparameter search on Optuna (ask and tell), resumable, pruned on evaluations, scored on a
population of seeds.

Each trial's sampled values join the command's overrides and run as a sweep of ``rltool train
-m`` on the search seeds 200, 201, ... (``<study>/trial-<n>/<k>/``: the same composition,
checks, status files, locks and resume as any sweep; ``hydra/launcher=joblib`` runs the seeds in
parallel). ``parallel=P`` runs P trials at once, each sweep in its own process (tune/pool.py;
Optuna's TPE then counts running trials as bad, ``constant_liar``, so they spread out). The
trial's value is the objective's statistic of its seeds' final evals (rltool.tune.objective).
One ``rltool tune`` process works on a study at a time: it holds the study folder's lock, and a
second one is refused with one line. Run the same command again after a kill: trials left
running resume from their checkpoints (done jobs are skipped), and the study ends with
``trials`` finished trials (completed, pruned or failed), never one twice. ``confirm=<n>`` runs
trial n's settings on the held-out population (seeds 100-119); ``export=<file>`` writes the best
trial's values as a ``conf/tuned/`` file. Exit status 1 when a trial failed (a job of its sweep
failed: recorded, the search goes on), as ``rltool train -m``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from hydra import compose, initialize_config_dir

from rltool import runlock
from rltool.cli.tune_run import Runner
from rltool.config_store import conf_dir, register_configs, to_config
from rltool.errors import EXIT_JOB_FAILED, EXIT_OK, UserError
from rltool.tune import space as sp
from rltool.tune import study as st
from rltool.tune.objective import Objective

USAGE = (
    "usage: rltool tune <overrides> search=<space> trials=N [seeds=K] [objective=mean|min|p10|"
    "median|max|count@G] [study=<dir>] [pruner=median|halving|none] [pruner_startup=5] "
    "[sampler_seed=0] [random_trials=10] [parallel=1] [confirm=<trial>] [export=<file.yaml>]"
)


@dataclass
class Options:
    """The command's own ``key=value`` arguments; every other argument goes to each trial."""

    search: str | None = None
    trials: int = 0
    seeds: int = 1
    objective: str = "mean"
    study: str | None = None  # default: multirun/tune/<search>
    pruner: str = "median"
    pruner_startup: int = 5  # trials that finish before the median pruner prunes
    sampler_seed: int = 0
    random_trials: int = 10  # TPE samples at random this many trials before it models them
    confirm: int | None = None
    export: str | None = None
    parallel: int = 1  # trials at once, each in its own process (tune/pool.py)

    def validate(self) -> None:
        if self.search is None:
            raise UserError(f"rltool tune needs search=<space>: one of {', '.join(sp.options())}")
        if self.confirm is None and self.trials < 1:
            raise UserError(f"trials={self.trials} is invalid: run at least 1 trial (trials=N)")
        if self.parallel < 1:
            raise UserError(f"parallel={self.parallel} is invalid: run at least 1 trial at once")
        if not 1 <= self.seeds <= st.MAX_SEEDS:
            raise UserError(f"seeds={self.seeds} is invalid: give 1 to {st.MAX_SEEDS} seeds")
        if self.pruner not in st.PRUNERS:
            raise UserError(
                f"pruner={self.pruner} is invalid: choose one of {', '.join(st.PRUNERS)}"
            )
        Objective.parse(self.objective)


_INTS = {f.name for f in fields(Options) if f.type.startswith("int")}  # trials, seeds, ...


def parse(argv: list[str]) -> tuple[Options, list[str]]:
    """(the command's options, the overrides for the trials)."""
    opts, rest = Options(), []
    for a in argv:
        key, eq, value = a.partition("=")
        if not eq or not hasattr(opts, key):
            rest.append(a)
            continue
        if key in _INTS:
            try:
                value = int(value)
            except ValueError:
                raise UserError(f"{key}={value!r} is invalid: expected an integer") from None
        setattr(opts, key, value)
    opts.validate()
    for a in rest:
        if a.lstrip("+~").split("=", 1)[0] == "seed":
            raise UserError(
                f"{a}: a study sets the seeds itself (search seeds {st.SEARCH_SEED0}+, confirm "
                "on 100-119): give seeds=K"
            )
        if a.startswith("-"):
            raise UserError(f"{a}: not an rltool tune argument ({USAGE})")
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
    if any(a in ("-h", "--help") for a in argv):
        print(USAGE)
        return EXIT_OK
    opts, overrides = parse(argv)
    need_optuna()
    space = sp.load(opts.search)
    dcfg = compose_base(overrides)
    added = sp.check_keys(space, dcfg, own(overrides))
    objective = Objective.parse(opts.objective)
    meta = st.Meta(
        opts.search, space.fingerprint(), str(objective), opts.seeds, opts.pruner, own(overrides)
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
        runner = Runner(folder, study, space, dcfg, objective, opts, overrides, added)
        if opts.confirm is not None:
            runner.confirm(opts.confirm)
        else:
            runner.search()
        if opts.export:
            runner.export(Path(opts.export))
    return EXIT_JOB_FAILED if runner.failed else EXIT_OK
