"""``rltool train resume=<run_dir>``: the arguments rewritten before Hydra starts (no torch
here). The resume itself (checkpoint loaded, config checked) happens in ``Session.start``
(:mod:`rltool.run.session`).

The run's config is read from ``<run_dir>/config.yaml`` (written when the run started, updated
only when a resume changes a safe key) into the schemas by :func:`rltool.config.saved.load`, the
one reader ``rltool.resume`` uses too. Hydra then composes: each config group set to its bare
schema, the saved values on top as a global overlay (the in-memory config ``rltool_resume/run``),
then the user's overrides, which may only touch :data:`rltool.config.saved.SAFE_KEYS`. Hydra runs
in ``run_dir`` and writes no ``.hydra/`` folder, so the record of the original launch stays
intact.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from rltool.config.saved import check_changes, load
from rltool.config.store import SCHEMA_PREFIX, groups, options
from rltool.errors import UserError
from rltool.runfolder.layout import CHECKPOINTS, CONFIG, RunFolder, has_checkpoint

_REFUSED_FLAGS = ("-m", "--multirun", "-cn", "--config-name", "-cp", "--config-path")
# the keys whose value is a folder: taken as the shell passed it, quoted for Hydra
PATH_KEYS = ("hydra.run.dir", "hydra.sweep.dir", "resume")


def _key(arg: str) -> str:
    return arg.split("=", 1)[0].lstrip("+~")


def path_value(text: str) -> str:
    """The folder a user typed: Hydra's reading of a quoted value (``'runs/a b'``), else the text
    as the shell passed it (``runs/ä b``: spaces, non-ASCII letters, commas)."""
    from rltool.cli.args import convert

    return convert("path", text, str)


def hydra_arg(key: str, path: str | Path) -> str:
    """``key=<path>`` as Hydra's override grammar reads back ``path`` exactly: as it is when it
    can (an interpolation such as ``${now:...}`` stays one), else single-quoted."""
    from rltool.cli.args import _grammar

    path = str(path)
    try:
        if _grammar(path) == path:
            return f"{key}={path}"
    except ValueError:
        pass
    # in a quoted value a backslash escapes only the quote or backslashes before one
    quoted = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", path)
    quoted = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, quoted)
    return f"{key}='{quoted}'"


def quote_paths(args: list[str]) -> list[str]:
    """``args`` with every folder value (:data:`PATH_KEYS`) quoted for Hydra when it must be."""
    out = []
    for a in args:
        key, eq, value = a.partition("=")
        if eq and key.lstrip("+~") in PATH_KEYS and value not in ("", "null"):
            a = hydra_arg(key, path_value(value))
        out.append(a)
    return out


def check_no_schema(args: list[str]) -> None:
    """Refuses a schema named as an option (``policy=base_policy``): schemas are internal (the
    resume rewrite below composes with them; a user never names one)."""
    known = set(groups())
    for a in args:
        if a.startswith("-") or "=" not in a:
            continue
        key, value = a.split("=", 1)
        group = key.lstrip("+~").split("@", 1)[0]
        if group not in known:
            continue
        for name in re.findall(r"[\w/.-]+", value):
            if name.startswith(SCHEMA_PREFIX):
                raise UserError(
                    f"unknown option {group}={name}: choose one of {', '.join(options(group))}"
                )


RESUME_GROUP = "rltool_resume"  # the saved config's overlay, stored in Hydra's ConfigStore


def resume_args(args: list[str]) -> list[str]:
    """``rltool train`` args -> the args for Hydra (a resume: the run's saved config first).

    Without ``resume=``, refuses an explicit ``hydra.run.dir`` that already holds a checkpoint."""
    resume = [a for a in args if _key(a) == "resume" and a.split("=", 1)[1] not in ("", "null")]
    if not resume:
        for a in args:
            if _key(a) == "hydra.run.dir" and has_checkpoint(path_value(a.split("=", 1)[1])):
                run_dir = path_value(a.split("=", 1)[1])
                raise UserError(
                    f"{run_dir} already holds a checkpoint: continue that run with "
                    f"rltool train {shlex.quote(f'resume={run_dir}')}, or choose another "
                    "hydra.run.dir"
                )
        return quote_paths(args)
    if len(resume) > 1:
        raise UserError("resume= is given more than once: give one run folder")
    run_dir = _check_run_dir(path_value(resume[0].split("=", 1)[1]))
    rest = [a for a in args if a not in resume]
    for a in rest:
        if a.split("=", 1)[0] in _REFUSED_FLAGS:
            raise UserError(
                f"{a} cannot be used with resume=: a resume continues one run with its own config"
            )
    check_changes(_key(a) for a in rest if not a.startswith("-") and "=" in a)
    saved = OmegaConf.to_container(load(run_dir), enum_to_str=True)
    user_keys = {_key(a) for a in rest if "=" in a}
    overlay = {k: v for k, v in saved.items() if k != "resume" and k not in user_keys}
    ConfigStore.instance().store(group=RESUME_GROUP, name="run", node=overlay, package="_global_")
    bases = [f"{g}={b}" for g, b in _bases(saved).items() if g not in user_keys]
    return [  # flags (--cfg job, ...) come last for Hydra's parser
        *bases,
        f"+{RESUME_GROUP}=run",
        hydra_arg("hydra.run.dir", run_dir),
        "hydra.output_subdir=null",
        hydra_arg("resume", run_dir),
        *quote_paths(rest),
    ]


def _check_run_dir(value: str) -> Path:
    run_dir = Path(value).expanduser().resolve()
    if not run_dir.is_dir():
        raise UserError(
            f"resume={value}: no such folder: give the folder of the run (the one holding "
            f"{CONFIG} and {CHECKPOINTS}/)"
        )
    if not RunFolder(run_dir).config.is_file():
        raise UserError(
            f"resume={value}: {run_dir} is not an rltool run folder (no {CONFIG}): give the "
            "folder that `rltool train` wrote"
        )
    if not has_checkpoint(run_dir):
        raise UserError(
            f"resume={value}: {run_dir} holds no checkpoint (the run stopped before its first "
            "one; see checkpoint.every_frames): start the run again"
        )
    return run_dir


def _bases(saved: dict) -> dict[str, str]:
    """Each config group of the saved config -> its bare schema (base_<group>, or
    base_<name> for groups whose schema depends on the option, like loss)."""
    repo = ConfigStore.instance().repo
    out = {}
    for group, value in saved.items():
        options = repo.get(group)
        if not isinstance(options, dict) or not isinstance(value, dict):
            continue
        for name in (f"base_{group}", f"base_{value.get('name')}"):
            if f"{name}.yaml" in options:
                out[group] = name
                break
    return out
