"""``rltool train -m ... --cfg job``: the jobs a sweep would run, listed without running any.

Hydra refuses ``--cfg`` with ``-m``; a sweep preset (``experiment=memory_suite``) holds its jobs in
``hydra.sweeper.params``, so the plan is what Hydra's basic sweeper would make of them and the
command line: one line per job with its overrides, its env and its frame budget, each job's
config composed and checked as the run would (a job that would be refused is refused here).
"""

from __future__ import annotations

from hydra import compose, initialize_config_dir
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser

from rltool.config.store import conf_dir, to_config

_FLAGS = ("-m", "--multirun", "--resolve")
_WITH_VALUE = ("--cfg", "-c", "--package", "-p")


def wants_plan(args: list[str]) -> bool:
    """A sweep (``-m``) asked for its config (``--cfg``)."""
    names = {a.split("=", 1)[0] for a in args}
    return bool(names & {"-m", "--multirun"}) and bool(names & {"--cfg", "-c"})


def overrides_of(args: list[str]) -> list[str]:
    """The command line without Hydra's flags (and their values)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in _WITH_VALUE:
            skip = True
        elif a not in _FLAGS and not a.startswith(tuple(f"{f}=" for f in _WITH_VALUE)):
            out.append(a)
    return out


def jobs(overrides: list[str]) -> list[list[str]]:
    """Each job's overrides, in the order the basic sweeper launches them: the preset's
    ``hydra.sweeper.params`` first, the command line after (it wins)."""
    parser = OverridesParser.create()
    fixed = [o.input_line for o in parser.parse_overrides(overrides) if not o.is_sweep_override()]
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        cfg = compose("config", overrides=fixed, return_hydra_config=True)
    params = [f"{k}={v}" for k, v in (cfg.hydra.sweeper.get("params") or {}).items()]
    parsed = parser.parse_overrides([*params, *overrides])
    return BasicSweeper.split_arguments(parsed, max_batch_size=None)[0]


def plan(args: list[str]) -> list[str]:
    """One line per job: its number, overrides, env id and frame budget (each config checked)."""
    lines = []
    for num, job in enumerate(jobs(overrides_of(args))):
        # Hydra's own groups (hydra/launcher=joblib) are the launcher's, not the job's config
        own = [o for o in job if not o.lstrip("+~").startswith("hydra")]
        with initialize_config_dir(conf_dir(), version_base="1.3"):
            cfg = to_config(compose("config", overrides=own))
        lines.append(
            f"job {num}: {' '.join(job)} -> env.id={cfg.env.id} policy={cfg.policy.kind} "
            f"seed={cfg.seed} total_frames={cfg.total_frames}"
        )
    return lines
