"""``rltool train resume=<run_dir>``: the arguments rewritten before Hydra starts (no torch
here). The resume itself (checkpoint loaded, config checked) happens in ``Session.start``
(:mod:`rltool.run.session`).

The run's config is composed from ``<run_dir>/config.yaml`` (written when the run started, updated
only when a resume changes a safe key): each config group is set to its bare schema and the saved
values are applied on top as a global overlay (a temporary config group ``rltool_resume``), then the
user's overrides, which may only touch :data:`rltool.config.store.SAFE_KEYS`. Hydra runs in
``run_dir`` and writes no ``.hydra/`` folder, so the record of the original launch stays intact.
"""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
from pathlib import Path

from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from rltool.config.store import SAFE_KEYS, SCHEMA_PREFIX, groups, is_safe, options, read_saved
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


def resume_args(args: list[str]) -> tuple[list[str], str | None]:
    """``rltool train`` args -> (args for Hydra, a temp folder to delete afterwards or None).

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
        return quote_paths(args), None
    if len(resume) > 1:
        raise UserError("resume= is given more than once: give one run folder")
    run_dir = _check_run_dir(path_value(resume[0].split("=", 1)[1]))
    rest = [a for a in args if a not in resume]
    for a in rest:
        if a.split("=", 1)[0] in _REFUSED_FLAGS:
            raise UserError(
                f"{a} cannot be used with resume=: a resume continues one run with its own config"
            )
        if not a.startswith("-") and "=" in a and not is_safe(_key(a)):
            raise UserError(
                f"{_key(a)} cannot change when resuming (only {', '.join(SAFE_KEYS[:-1])} may): "
                "start a new run to change it"
            )
    saved = _saved_config(run_dir)
    user_keys = {_key(a) for a in rest if "=" in a}
    tmp = Path(tempfile.mkdtemp(prefix="rltool-resume-"))
    overlay = {k: v for k, v in saved.items() if k != "resume" and k not in user_keys}
    (tmp / "rltool_resume").mkdir()
    (tmp / "rltool_resume" / "run.yaml").write_text(
        "# @package _global_\n" + OmegaConf.to_yaml(OmegaConf.create(overlay))
    )
    bases = [f"{g}={b}" for g, b in _bases(saved).items() if g not in user_keys]
    return [  # flags (--cfg job, ...) come last for Hydra's parser
        *bases,
        f"hydra.searchpath=['file://{tmp}']",
        "+rltool_resume=run",
        hydra_arg("hydra.run.dir", run_dir),
        "hydra.output_subdir=null",
        hydra_arg("resume", run_dir),
        *quote_paths(rest),
    ], str(tmp)


def cleanup(tmp: str | None) -> None:
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)


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


def _saved_config(run_dir: Path) -> dict:
    return read_saved(RunFolder(run_dir).config)  # older runs' memory keys migrated


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
