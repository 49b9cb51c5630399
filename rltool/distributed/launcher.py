"""Starting one run on several local processes: torch's elastic agent (what ``torchrun
--standalone`` runs) with N copies of ``rltool train``, and how rank 0 tells it its run folder
and exit status (torch loads only in :func:`launch`)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import tempfile
import uuid
from pathlib import Path

from rltool.errors import EXIT_PEER_LOST, EXIT_PREEMPTED

_log = logging.getLogger(__name__)

REPORT = "RLTOOL_LAUNCH_REPORT"  # rank 0 writes its run folder and exit status there


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
