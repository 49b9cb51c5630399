"""Starting a run on several processes, and what each of them is (no torch until a launch).

- ``rltool train distributed.nproc_per_node=N ...``: :func:`launch` checks the config (bad input
  refused before any rank starts), then runs torch's elastic launcher (what ``torchrun
  --standalone`` runs) with N copies of the same command line; it returns rank 0's exit status,
  or names the rank that died first.
- ``torchrun ... -m rltool train ...`` (one machine or several, c10d rendezvous), Slurm's
  ``srun`` (``SLURM_PROCID`` etc.) and the tasks of a submitit job (Hydra's submitit launcher with
  ``tasks_per_node``) start the ranks themselves; :func:`worker_rank` turns what each finds in its
  environment into torch's variables.

Ranks other than 0 write nothing: :func:`follower_args` points their Hydra at a scratch folder
with no ``.hydra/`` record and no log; rank 0 chooses the run folder and shares it.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import sys
import tempfile
import uuid
import zlib
from pathlib import Path

from rltool.errors import EXIT_PEER_LOST, EXIT_PREEMPTED, UserError

_log = logging.getLogger(__name__)

REPORT = "RLTOOL_LAUNCH_REPORT"  # rank 0 writes its run folder and exit status there
SLURM_PORT_BASE = 20_000  # MASTER_PORT under Slurm without one: this + job id % 10,000


def _first_host(nodelist: str) -> str:
    """The first host of a Slurm node list: ``node[03-05,9],gpu1`` -> ``node03``."""
    m = re.match(r"([^,\[]+)(?:\[([^\],-]+))?", nodelist)
    return m.group(1) + (m.group(2) or "") if m else "localhost"


def from_slurm(env: dict) -> None:
    """Torch's variables from an ``srun`` step of several tasks (each task one rank); a variable
    already set wins. Only a step of more than one task: a batch script of several tasks that
    runs ``rltool train`` once is one process."""
    if int(env.get("SLURM_STEP_NUM_TASKS", "1")) <= 1 or "RANK" in env:
        return
    job = int(env.get("SLURM_JOB_ID", "0"))
    nodes = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")  # rank 0: the first
    host = _first_host(nodes) if nodes else env.get("SLURM_LAUNCH_NODE_IPADDR", "localhost")
    env.setdefault("RANK", env["SLURM_PROCID"])
    env.setdefault("WORLD_SIZE", env["SLURM_STEP_NUM_TASKS"])
    env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
    env.setdefault("MASTER_ADDR", host)
    env.setdefault("MASTER_PORT", str(SLURM_PORT_BASE + job % 10_000))


def from_submitit(env: dict) -> None:
    """Torch's variables in a task of a submitit job of several tasks (a Hydra sweep with
    ``hydra/launcher=submitit_*`` and ``hydra.launcher.tasks_per_node``): each task a rank."""
    if "RANK" in env or not env.get("SUBMITIT_EXECUTOR"):
        return
    import submitit

    job = submitit.JobEnvironment()
    if job.num_tasks <= 1:
        return
    local = env["SUBMITIT_EXECUTOR"] == "local"
    env.setdefault("RANK", str(job.global_rank))
    env.setdefault("WORLD_SIZE", str(job.num_tasks))
    env.setdefault("LOCAL_RANK", str(job.local_rank))
    env.setdefault("MASTER_ADDR", "127.0.0.1" if local else job.hostnames[0])
    env.setdefault(
        "MASTER_PORT", str(SLURM_PORT_BASE + zlib.crc32(str(job.job_id).encode()) % 10_000)
    )


def worker_rank() -> int | None:
    """This process's rank when it is one of a distributed run's processes, else None."""
    from_submitit(os.environ)
    from_slurm(os.environ)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["RANK"])


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


def launch(argv: list[str], n: int, shutdown_s: float, debug: bool = False) -> int:
    """Runs ``rltool train argv`` on ``n`` local ranks under torch's elastic agent (with
    ``--debug`` when ``debug``); returns rank 0's exit status (75 after SIGTERM, once it wrote
    its checkpoint)."""
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    report = Path(tempfile.mkdtemp(prefix="rltool-launch-")) / "rank0.json"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=n,
        run_id=str(uuid.uuid4()),
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",
        max_restarts=0,
        shutdown_timeout=int(shutdown_s),  # the ranks' time to finish an update and checkpoint
    )
    # the elastic agent gives its ranks a copy of os.environ and takes no environment of its
    # own: the report's path goes through it for the launch only
    saved = {REPORT: os.environ.get(REPORT)}
    os.environ[REPORT] = str(report)
    cmd = ["-m", "rltool", *(["--debug"] if debug else []), "train", *argv]
    try:
        elastic_launch(config, sys.executable)(*cmd)
        return _status(report, 0)
    except SignalException as e:
        return _status(report, 128 + int(e.sigval))
    except ChildFailedError as e:
        return _failed(e, report)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        report.unlink(missing_ok=True)
        report.parent.rmdir()


def _status(report: Path, default: int) -> int:
    try:
        return int(json.loads(report.read_text())["exit"])
    except (OSError, ValueError, KeyError):
        return default


# how the ranks that another's failure stopped end: they lost it (76), or the agent's SIGTERM
# stopped them (75 once they wrote a checkpoint, -15 otherwise)
_VICTIMS = (EXIT_PEER_LOST, EXIT_PREEMPTED, -int(signal.SIGTERM))


def _failed(e, report: Path) -> int:
    """Rank 0's status when it failed by itself (it printed its line); else one line naming
    the rank that failed (not one that only lost the others, see :data:`_VICTIMS`)."""
    failures = e.failures
    culprits = sorted(r for r, f in failures.items() if f.exitcode not in _VICTIMS)
    rank = culprits[0] if culprits else min(failures)
    failure = failures[rank]
    if rank == 0 and failure.exitcode > 0:
        return _status(report, failure.exitcode)
    how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit {failure.exitcode}"
    try:
        run_dir = json.loads(report.read_text()).get("run_dir")
    except (OSError, ValueError):
        run_dir = None
    _log.error(
        f"rltool train: rank {rank} stopped ({how}), so the others were stopped; the latest "
        f"checkpoint is intact: rltool train resume={run_dir or '<run folder>'}"
    )
    return EXIT_PEER_LOST


def report(**fields) -> None:
    """Rank 0 of a run that :func:`launch` started tells it ``fields`` (run_dir, exit)."""
    path = os.environ.get(REPORT)
    if not path or os.environ.get("RANK") != "0":
        return
    try:
        old = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        old = {}
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(old | fields))
    os.replace(tmp, path)
