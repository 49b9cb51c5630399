"""A study's results, read from its folder: the trials ranked by the objective, with their
values (``rltool report <study>``), and what ``rltool plot <study>`` draws."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from rltool.analysis.tables import grid
from rltool.sweeps.tune import study as st

# rank order of the trial states: completed (by value), then the rest by trial number
_ORDER = {"COMPLETE": 0, "PRUNED": 1, "RUNNING": 2, "WAITING": 2, "FAIL": 3}


def load(folder: Path):
    """The study of ``folder`` (a UserError when it is none), read from its storage."""
    import optuna

    st.load_meta(folder)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=st.STUDY_NAME, storage=st.storage(Path(folder)))


def ranked(study) -> list[dict]:
    """One dict per trial: rank (completed trials only), trial, state, value, params."""
    trials = sorted(
        study.get_trials(deepcopy=False),
        key=lambda t: (_ORDER.get(t.state.name, 4), -(t.value or 0.0), t.number),
    )
    out = []
    for i, t in enumerate(trials):
        done = t.state.name == "COMPLETE"
        out.append(
            {
                "rank": i + 1 if done else None,
                "trial": t.number,
                "state": t.state.name.lower(),
                "value": t.value if done else math.nan,
                "params": dict(t.params),
            }
        )
    return out


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def format_trials(table: list[dict], objective: str, fmt: str = "table") -> str:
    """The ranked trials as aligned columns, markdown or csv; a column per searched key."""
    keys = list(dict.fromkeys(k for r in table for k in r["params"]))
    head = ["rank", "trial", "state", objective, *keys]
    raw = [
        [r["rank"], r["trial"], r["state"], r["value"], *(r["params"].get(k) for k in keys)]
        for r in table
    ]
    if fmt != "csv":
        return grid(head, [[_cell(v) for v in line] for line in raw], fmt)
    buf = io.StringIO()  # csv: the values as they are (empty when none)
    csv.writer(buf).writerows([head, *[["" if v is None else v for v in line] for line in raw]])
    return buf.getvalue().rstrip("\n")


def history(study) -> tuple[list[int], list[float], list[float]]:
    """(trial numbers, values, best so far) of the completed trials, in trial order."""
    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    numbers, values, best = [], [], []
    for t in sorted(done, key=lambda t: t.number):
        numbers.append(t.number)
        values.append(t.value)
        best.append(max(t.value, best[-1]) if best else t.value)
    return numbers, values, best


def pruned(study) -> list[int]:
    """The numbers of the pruned trials (they have no value; the history marks where they ran)."""
    return sorted(t.number for t in study.get_trials(deepcopy=False) if t.state.name == "PRUNED")


def importances(study) -> dict[str, float]:
    """Optuna's parameter importances (fANOVA) over the completed trials; empty with fewer than
    two of them."""
    import optuna

    done = [t for t in study.get_trials(deepcopy=False) if t.state.name == "COMPLETE"]
    if len(done) < 2:
        return {}
    try:
        return optuna.importance.get_param_importances(study)
    except (RuntimeError, ValueError):  # e.g. no parameter varies among the completed trials
        return {}
