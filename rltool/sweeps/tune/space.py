"""Search spaces: ``conf/search/<name>.yaml`` (or a path to a YAML file), typed and checked.

A space maps config keys (dotted, as on the command line) to a distribution::

    params:
      optim.lr: {type: float, low: 1.0e-4, high: 3.0e-3, log: true}
      loss.epochs: {type: int, low: 4, high: 20}
      policy.hidden_size: {type: categorical, choices: [32, 64, 128],
                           when: {policy.kind: [lstm, gru]}}

``when`` makes a key conditional: it is searched only when each named key's value (in the
composed config, or sampled before it) is one of those listed. Nothing here imports optuna:
:func:`sample` takes any object with optuna's ``suggest_*`` methods.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rltool.config import check
from rltool.config.store import conf_dir
from rltool.errors import UserError

SEARCH = "search"  # conf/search/: the shipped spaces
FLOAT, INT, CATEGORICAL = "float", "int", "categorical"
_MISSING = object()


@dataclass
class Param:
    type: str = FLOAT  # float | int | categorical
    low: float | None = None
    high: float | None = None
    log: bool = False  # sample uniformly in log space (float, int)
    step: float | None = None  # a grid step (float, int)
    choices: list[Any] = field(default_factory=list)  # categorical
    when: dict[str, list[Any]] = field(default_factory=dict)  # key -> the values it applies to

    def validate(self, key: str) -> None:
        check(
            self.type in (FLOAT, INT, CATEGORICAL),
            f"{key}.type",
            self.type,
            "choose one of float, int, categorical",
        )
        if self.type == CATEGORICAL:
            check(bool(self.choices), f"{key}.choices", self.choices, "give at least one choice")
            return
        check(
            self.low is not None and self.high is not None,
            key,
            (self.low, self.high),
            "give low and high",
        )
        check(
            self.low < self.high,
            key,
            f"[{self.low}, {self.high}]",
            "an empty range: low must be below high",
        )
        check(not self.log or self.low > 0, f"{key}.low", self.low, "log ranges need low > 0")


@dataclass
class Space:
    params: dict[str, Param] = field(default_factory=dict)

    def fingerprint(self) -> str:
        """A hash of the space as loaded: a study keeps it to refuse another space later."""
        text = json.dumps(OmegaConf.to_container(OmegaConf.structured(self)), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def options() -> list[str]:
    return sorted(p.stem for p in (Path(conf_dir()) / SEARCH).glob("*.yaml"))


def load(name: str) -> Space:
    """``name``: a shipped space (``conf/search/<name>.yaml``) or a path to a YAML file."""
    path = Path(name)
    if not (name.endswith((".yaml", ".yml")) and path.is_file()):
        path = Path(conf_dir()) / SEARCH / f"{name}.yaml"
        if not path.is_file():
            raise UserError(
                f"unknown search space search={name}: choose one of {', '.join(options())} "
                "(or give a path to a YAML file)"
            )
    try:
        space = OmegaConf.to_object(
            OmegaConf.merge(OmegaConf.structured(Space), OmegaConf.load(path))
        )
    except Exception as e:  # noqa: BLE001 - a typo or a wrong type in the file: one line
        raise UserError(f"search space {path}: {str(e).splitlines()[0]}") from None
    if not space.params:
        raise UserError(f"search space {path} has no params: give at least one key")
    for key, param in space.params.items():
        param.validate(f"search {key}")
    return space


def _free(cfg, key: str) -> bool:
    """``key`` is new to ``cfg`` but may be added: its parent maps any keys (env.kwargs)."""
    parent, _, _ = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else None
    return OmegaConf.is_dict(node) and node._metadata.object_type is dict


def check_keys(space: Space, cfg, fixed: list[str]) -> set[str]:
    """Every searched key (and ``when`` key) must be a key of the composed config ``cfg`` (or of
    a free mapping in it, such as ``env.kwargs``: returned, they are added with ``++``), and none
    may also be set on the command line (``fixed``: its ``key=value`` overrides)."""
    given = {o.lstrip("+~").split("=", 1)[0] for o in fixed}
    added = set()
    for key, param in space.params.items():
        for k in (key, *param.when):
            if k in space.params and k != key:
                continue
            if OmegaConf.select(cfg, k, default=_MISSING) is _MISSING:
                if k != key or not _free(cfg, k):
                    raise UserError(
                        f"search space key {k!r} is not a config key: check the spelling "
                        "(rltool train --cfg job lists every key)"
                    )
                added.add(k)
        if key in given:
            raise UserError(f"{key} is both searched and set on the command line: drop one")
        if key == "seed":
            raise UserError("seed cannot be searched: a trial runs on seeds=K search seeds")
    return added


def _applies(param: Param, cfg, sampled: dict) -> bool:
    for k, values in param.when.items():
        value = sampled[k] if k in sampled else OmegaConf.select(cfg, k, default=None)
        if value not in values:
            return False
    return True


def sample(space: Space, trial, cfg) -> dict[str, Any]:
    """The trial's values, key by key in the file's order (a conditional key after its
    condition); keys whose ``when`` does not hold are left out."""
    out: dict[str, Any] = {}
    for key, p in space.params.items():
        if not _applies(p, cfg, out):
            continue
        if p.type == CATEGORICAL:
            out[key] = trial.suggest_categorical(key, p.choices)
        elif p.type == INT:
            out[key] = trial.suggest_int(
                key, int(p.low), int(p.high), step=int(p.step or 1), log=p.log
            )
        else:
            out[key] = trial.suggest_float(key, p.low, p.high, step=p.step, log=p.log)
    return out


def _text(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, str):  # a plain word stays bare: a group's option (policy=gru) too
        return v if re.fullmatch(r"[\w.-]+", v) else json.dumps(v)
    return repr(v)


def overrides(values: dict[str, Any], added: set[str] = frozenset()) -> list[str]:
    """Hydra overrides of sampled values, the same text for the same values (a sweep compares
    a job's overrides with those it ran with); keys in ``added`` are new keys (``++``)."""
    return [f"{'++' * (k in added)}{k}={_text(v)}" for k, v in values.items()]
