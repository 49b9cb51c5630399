"""What a rank of a distributed run finds in its environment, as torch's variables (``RANK``,
``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``): set by torchrun or rltool's
launcher, or derived from Slurm's ``srun`` step and a submitit job's tasks. No torch here."""

from __future__ import annotations

import os
import re
import zlib

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
