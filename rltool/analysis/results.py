"""Results of runs and sweeps, read from their folders (for ``rltool report`` and ``rltool plot``).

A run folder (:mod:`rltool.runfolder.layout`) holds ``config.yaml``, the metrics file
(``metrics.csv``, or
the run's ``logger.csv.filename``), ``summary.json`` (written by training), ``status.json`` (the
job's status) and, from Hydra, ``.hydra/overrides.yaml``. Runs are grouped into settings by their
overrides minus the seed (overrides shared by every run are left out of the setting's name when
there are several settings), or with ``by`` by the values of config keys: a group name (``env``,
``policy``) means the option the run took, any other key its value in ``config.yaml``.

A setting's row is a population: the final evaluations of its seeds (mean, min, 10th percentile,
median, max; the count at or above a goal) and the best periodic evaluation of each seed.
The tables themselves (rows, aggregates, formats): :mod:`rltool.analysis.tables`.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from rltool import memories
from rltool.errors import UserError
from rltool.runfolder import layout
from rltool.runfolder.layout import RunFolder

_SKIP_PARTS = {
    ".submitit",
    layout.HYDRA,
    layout.WANDB,
    layout.TENSORBOARD,
    layout.CHECKPOINTS,
    layout.VIDEOS,
}
# files that mark a run folder below a sweep folder (config.yaml: a run whose metrics file has
# another name; it counts when that file is there)
_MARKERS = (layout.METRICS, layout.STATUS, layout.CONFIG)


@dataclass
class RunInfo:
    path: Path
    overrides: list[str]
    status: str
    error: str | None
    summary: dict

    @property
    def seed_free(self) -> tuple[str, ...]:
        return tuple(o for o in self.overrides if o.lstrip("+~").split("=")[0] != "seed")

    @cached_property
    def config(self) -> dict:
        return memories.migrate(_load_yaml(RunFolder(self.path).config))  # older runs too

    @cached_property
    def choices(self) -> dict:
        """The option each config group took (Hydra's runtime.choices), e.g. env: cartpole."""
        hydra = _load_yaml(RunFolder(self.path).hydra_config)
        return ((hydra.get("hydra") or {}).get("runtime") or {}).get("choices") or {}

    def value(self, key: str):
        """A group's option, or a config key's value (dotted), or None."""
        if key in self.choices:
            return self.choices[key]
        node = self.config
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        return node

    @cached_property
    def best_eval(self) -> float:
        """The best evaluation's mean return (summary.json; older runs: from the metrics)."""
        best = self.summary.get("best_eval/return_mean")
        if best is None:
            _, ys = eval_curve(self)
            best = float(ys.max()) if len(ys) else math.nan
        return best


@dataclass
class Setting:
    name: str
    runs: list[RunInfo] = field(default_factory=list)
    # what sets it apart: the ``by`` keys' values, or its overrides' (key: value)
    values: dict[str, str] = field(default_factory=dict)


def _is_run(d: Path) -> bool:
    run = RunFolder(d)
    return any(p.is_file() for p in (run.status, run.summary, run.metrics))


def _skipped(c: Path, top: Path) -> bool:
    return bool(_SKIP_PARTS & set(c.relative_to(top).parts))


class Unreadable(Exception):
    """A folder that looks like a run but whose files cannot be read (one line: which and why)."""


def find_runs(
    dirs: Iterable[str], unreadable: list[tuple[Path, str]] | None = None
) -> list[RunInfo]:
    """Every readable run folder at or below ``dirs``; raises UserError when there is none.
    Folders whose files cannot be read are never runs: each is appended to ``unreadable`` as
    (folder, why)."""
    runs, seen, bad = [], set(), []
    for d in map(Path, dirs):
        if not d.is_dir():
            raise UserError(
                f"{d}: no such folder; give run or sweep folders (outputs/..., multirun/...)"
            )
        if _is_run(d):
            cands = [d]
        else:
            found = {p.parent for n in _MARKERS for p in d.rglob(n)}
            cands = sorted((c for c in found if not _skipped(c, d) and _is_run(c)), key=_natural)
        for c in cands:
            if c.resolve() not in seen and not _skipped(c, d):
                seen.add(c.resolve())
                try:
                    runs.append(_read_run(c))
                except Unreadable as e:
                    bad.append((c, str(e)))
    if unreadable is not None:
        unreadable.extend(bad)
    if not runs:
        more = f" ({len(bad)} unreadable folder(s) left out)" if bad else ""
        raise UserError(
            f"no runs found in {', '.join(map(str, dirs))}{more}: give folders made by "
            "rltool train (each run holds metrics.csv and status.json)"
        )
    return runs


def _natural(p: Path):
    return [(0, int(s), "") if s.isdigit() else (1, 0, s) for s in p.parts]


def _json(path: Path) -> dict | None:
    """A JSON object file: None when missing; :class:`Unreadable` when it does not parse."""
    if not path.exists():
        return None
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise Unreadable(f"{path.name} is not JSON ({type(e).__name__})") from None
    if not isinstance(value, dict):
        raise Unreadable(f"{path.name} does not hold a JSON object")
    return value


def _read_run(d: Path) -> RunInfo:
    """The run in ``d``; :class:`Unreadable` when one of its files does not parse (a
    ``config.yaml`` that is not YAML, a metrics file without a ``frames`` column, a status or
    summary that is not JSON), or when nothing in it says what the run is."""
    run = RunFolder(d)
    for path in (run.config, run.overrides):
        if path.is_file():
            try:
                node = OmegaConf.load(path)
            except Exception as e:  # noqa: BLE001 - YAML errors of every kind
                raise Unreadable(f"{path.name} is not YAML ({type(e).__name__})") from None
            is_config = path == run.config
            if not (OmegaConf.is_dict(node) if is_config else OmegaConf.is_list(node)):
                raise Unreadable(f"{path.name} does not hold a {'config' if is_config else 'list'}")
    st = _json(run.status) or {}
    summary = _json(run.summary) or {}
    metrics = run.metrics
    if metrics.is_file():
        try:
            with metrics.open(newline="") as f:
                header = next(csv.reader(f), [])
        except (OSError, UnicodeDecodeError, csv.Error) as e:
            raise Unreadable(f"{metrics.name} is not readable ({type(e).__name__})") from None
        if "frames" not in header:
            raise Unreadable(f"{metrics.name} is not an rltool metrics file (no frames column)")
    if not st.get("status") and not summary and not metrics.is_file():
        raise Unreadable("no status.json, summary.json or metrics file says what this run is")
    overrides = st.get("overrides")
    if run.overrides.is_file():
        overrides = [str(o) for o in OmegaConf.load(run.overrides)]
    status = st.get("status") or ("done" if summary else "unknown")
    return RunInfo(d, list(overrides or []), status, st.get("error"), summary)


def _load_yaml(path: Path) -> dict:
    try:
        out = OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}
    except Exception:  # noqa: BLE001 - an unreadable file says nothing
        return {}
    return out if isinstance(out, dict) else {}


def group_runs(runs: list[RunInfo], by: list[str] | None = None) -> list[Setting]:
    """Settings in the order their first run was found: by the ``by`` keys' values, or by the
    overrides minus the seed."""
    if by:
        settings: dict[tuple, Setting] = {}
        for r in runs:
            values = tuple(r.value(k) for k in by)
            name = " ".join(f"{k}={_short(v)}" for k, v in zip(by, values, strict=True))
            named = {k: _short(v) for k, v in zip(by, values, strict=True)}
            settings.setdefault(tuple(map(str, values)), Setting(name, values=named))
            settings[tuple(map(str, values))].runs.append(r)
        return list(settings.values())
    keys = list(dict.fromkeys(r.seed_free for r in runs))
    common = set.intersection(*(set(k) for k in keys)) if len(keys) > 1 else set()
    settings: dict[tuple, Setting] = {}
    for r in runs:
        name = " ".join(o for o in r.seed_free if o not in common) or "(defaults)"
        own = [o for o in r.seed_free if o not in common and "=" in o]
        named = dict(o.lstrip("+~").split("=", 1) for o in own)
        settings.setdefault(r.seed_free, Setting(name, values=named)).runs.append(r)
    return list(settings.values())


def mixed(settings: list[Setting], key: str = "env.id") -> list[tuple[str, list[str]]]:
    """(setting name, the values) of each setting whose runs differ in ``key``: grouped by keys
    that do not tell their tasks apart (``by=env`` over POPGym tasks, all ``env=popgym``)."""
    out = []
    for s in settings:
        values = sorted({_short(r.value(key)) for r in s.runs})
        if len(values) > 1:
            out.append((s.name, values))
    return out


def _short(v) -> str:
    return "-" if v is None else str(v).replace(" ", "")


def finite(xs) -> list[float]:
    return [float(x) for x in xs if x is not None and math.isfinite(x)]


def eval_curve(run: RunInfo, metric: str = "eval/return_mean") -> tuple[np.ndarray, np.ndarray]:
    """(frames, metric) at the rows of the run's metrics file where ``metric`` was logged."""
    xs, ys = [], []
    path = RunFolder(run.path).metrics
    if path.is_file():
        with path.open(newline="") as f:
            for row in csv.DictReader(f):
                if row.get(metric):
                    xs.append(float(row["frames"]))
                    ys.append(float(row[metric]))
    return np.asarray(xs), np.asarray(ys)


def band(curves: list[tuple[np.ndarray, np.ndarray]]):
    """Mean and std over seeds on the union of their frame counts, up to where every seed has
    data (linear interpolation between a seed's own points). Returns (x, mean, std)."""
    curves = [c for c in curves if len(c[0])]
    if not curves:
        return np.array([]), np.array([]), np.array([])
    end = min(c[0][-1] for c in curves)
    x = np.unique(np.concatenate([c[0] for c in curves]))
    x = x[x <= end]
    ys = np.stack([np.interp(x, cx, cy) for cx, cy in curves])
    return x, ys.mean(0), ys.std(0)
