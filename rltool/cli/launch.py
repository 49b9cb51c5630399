"""``rltool train``'s arguments for a run on several processes (no torch here).

- ``rltool train distributed.nproc_per_node=N ...``: :func:`nproc` checks the config (bad input
  refused before any rank starts), then :func:`rltool.distributed.launcher.launch` runs torch's
  elastic launcher with N copies of the same command line.
- ``torchrun ... -m rltool train ...`` (one machine or several, c10d rendezvous), Slurm's
  ``srun`` (``SLURM_PROCID`` etc.) and the tasks of a submitit job (Hydra's submitit launcher with
  ``tasks_per_node``) start the ranks themselves;
  :func:`rltool.distributed.environ.worker_rank` turns what each finds in its environment into
  torch's variables.

Ranks other than 0 write nothing: :func:`follower_args` points their Hydra at a scratch folder
with no ``.hydra/`` record and no log; rank 0 chooses the run folder and shares it.
"""

from __future__ import annotations

import tempfile

from rltool.errors import UserError


def follower_args(args: list[str]) -> tuple[list[str], str]:
    """A rank > 0's Hydra arguments: a scratch run folder (to delete afterwards), no record,
    no log. The run folder it trains in is rank 0's (shared after rank 0 locked it)."""
    scratch = tempfile.mkdtemp(prefix="rltool-rank-")
    kept = [a for a in args if not a.startswith(("hydra.run.dir=", "hydra.output_subdir="))]
    return [
        *[a for a in kept if not a.startswith("-")],
        f"hydra.run.dir={scratch}",
        "hydra.output_subdir=null",
        "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled",
        *[a for a in kept if a.startswith("-")],
    ], scratch


def nproc(args: list[str]) -> int:
    """``distributed.nproc_per_node`` of the command (its config composed and checked: bad
    input is refused here, before any rank starts); 1 without a ``distributed`` or ``resume``
    argument (nothing else sets it)."""
    if not any(a.startswith(("distributed", "resume=", "+rltool_resume")) for a in args):
        return 1
    from hydra import compose, initialize_config_dir

    from rltool.config.store import conf_dir, to_config

    own = [a for a in args if not a.startswith("-") and not _hydra_only(a)]
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        cfg = to_config(compose("config", overrides=own))
    n = cfg.distributed.nproc_per_node
    if n > 1 and any(a in ("-m", "--multirun") for a in args):
        raise UserError(
            f"distributed.nproc_per_node={n} starts one run on {n} processes: sweep one-process "
            "jobs, or start each distributed run on its own"
        )
    return n


def _hydra_only(arg: str) -> bool:
    key = arg.split("=", 1)[0].lstrip("+~")
    return key.startswith("hydra") and key != "hydra.searchpath"
