"""The study folder: the Optuna study (RDB storage on SQLite), what it was made with, and one
sweep folder per trial::

    <study>/
      study.db          Optuna's storage (sqlite): trials, their params, values, reported evals
      study.json        how the study was made: search space, objective, seeds, overrides, pruner
      .lock             held by the rltool tune process working on the study (rltool.runfolder.lock)
      trial-<n>/<k>/    trial n's job on its k-th search seed (a sweep folder, as rltool train -m)
      confirm-<n>/<k>/  trial n's settings on the held-out population (confirm=<n>)

A study is made once: a later command on the same folder must bring the same search space,
objective, seeds, overrides and pruner (it may ask for more trials).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rltool.analysis.results import find_runs
from rltool.errors import UserError
from rltool.sweeps.jobs import read_status
from rltool.sweeps.tune.objective import Objective

DB = "study.db"
META = "study.json"
STUDY_NAME = "rltool-tune"
# defaults of rltool tune's seed0=, population_seed0=, population_seeds= (rltool/cli/tune.py)
SEARCH_SEED0 = 200  # trial seeds are 200, 201, ...: the tuning seeds (docs/results/protocol.md)
MAX_SEEDS = 100  # so they stay below CI's learning-check seeds (300-302)
POPULATION = tuple(range(100, 120))  # the held-out population: confirm=<trial>, never searched
PRUNERS = ("median", "halving", "none")
DONE, PRUNED, FAILED = "done", "pruned", "failed"


def trial_dir(study: Path, number: int) -> Path:
    return Path(study) / f"trial-{number:04d}"


def confirm_dir(study: Path, number: int) -> Path:
    return Path(study) / f"confirm-{number:04d}"


def is_study(path) -> bool:
    return (Path(path) / META).is_file()


def search_seeds(k: int, first: int = SEARCH_SEED0) -> list[int]:
    return list(range(first, first + k))


def population(first: int = POPULATION[0], count: int = len(POPULATION)) -> list[int]:
    """The held-out seeds of ``confirm=``."""
    return list(range(first, first + count))


@dataclass
class Meta:
    """What a study is made with (``study.json``)."""

    search: str
    space: str  # the space's fingerprint
    objective: str
    seeds: int
    pruner: str
    overrides: list[str] = field(default_factory=list)
    seed0: int = SEARCH_SEED0  # the first search seed (a study.json without it: the default)

    def save(self, study: Path) -> None:
        (Path(study) / META).write_text(json.dumps(asdict(self), indent=2))

    def refuse_other(self, study: Path) -> None:
        """One line when ``study`` was made with something else (its first difference)."""
        old = json.loads((Path(study) / META).read_text())
        defaults = {"seed0": SEARCH_SEED0}  # written before the key existed
        for k, v in asdict(self).items():
            if old.get(k, defaults.get(k)) != v:
                what = "search space (its file changed)" if k == "space" else k
                raise UserError(
                    f"study {study} was made with another {what} ({old.get(k)!r}, not {v!r}): "
                    "rerun it with its own settings, or give another study=<folder>"
                )


def load_meta(study: Path) -> dict:
    if not is_study(study):
        raise UserError(f"{study}: not a study folder (no {META}): made by rltool tune")
    return json.loads((Path(study) / META).read_text())


def storage(study: Path) -> str:
    return f"sqlite:///{(Path(study) / DB).resolve()}"


def make_pruner(name: str, startup: int):
    """median: prune below the median of earlier trials at the same step; halving: successive
    halving over the evaluations; none."""
    import optuna

    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=startup, n_warmup_steps=0)
    if name == "halving":
        return optuna.pruners.SuccessiveHalvingPruner()
    return optuna.pruners.NopPruner()


def open_study(study: Path, opts):
    """The study in ``study``'s storage (created when new), maximising the objective; ``opts``:
    the command's pruner, pruner_startup, sampler_seed, random_trials and parallel."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    s = optuna.create_study(
        storage=storage(study),
        study_name=STUDY_NAME,
        direction="maximize",
        pruner=make_pruner(opts.pruner, opts.pruner_startup),
        load_if_exists=True,
    )
    # seeded by the trials so far: a resumed search does not draw the same values again
    s.sampler = optuna.samplers.TPESampler(
        n_startup_trials=opts.random_trials,
        seed=opts.sampler_seed + len(s.trials),
        constant_liar=opts.parallel > 1,  # trials at once: don't all sample the same region
    )
    return s


def outcome(folder: Path, seeds: int, objective: Objective) -> tuple[str | None, float, str]:
    """(done | pruned | failed | None: unfinished, the objective's value, why) of the jobs of a
    trial's sweep folder."""
    statuses = [(read_status(Path(folder) / str(k)) or {}) for k in range(seeds)]
    states = [s.get("status") for s in statuses]
    if PRUNED in states:
        return PRUNED, math.nan, ""
    if FAILED in states:
        return (
            FAILED,
            math.nan,
            next(s.get("error") or "" for s in statuses if s.get("status") == FAILED),
        )
    if all(st == DONE for st in states):
        value = objective.of_runs(find_runs([str(folder)]))
        if math.isfinite(value):
            return DONE, value, ""
        return FAILED, value, "no final eval in the trial's runs"
    return None, math.nan, ""


def best_trial(study):
    """The completed trial of the highest value (the first of equals), or None."""
    done = [t for t in study.trials if t.value is not None and math.isfinite(t.value)]
    return max(done, key=lambda t: t.value) if done else None


def best_line(study) -> str:
    best = best_trial(study)
    return "no completed trial yet" if best is None else f"best trial {best.number}: {best.value:g}"


def nest(values: dict) -> dict:
    """Dotted keys -> nested mappings (a conf/tuned/ file's layout)."""
    out: dict = {}
    for key, v in values.items():
        node = out
        *parents, last = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = v
    return out
