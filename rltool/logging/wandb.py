"""Weights & Biases: frames as the step metric, the resolved config, one group per sweep, and the
same run id across resumes (kept in ``<run_dir>/wandb_id``).

``wandb.init`` can block for a minute and more without a network, so the mode is settled before
init: ``online`` without an API key or without a reachable server falls back to ``offline`` with a
warning that says how to sync later; ``disabled`` logs nothing."""

from __future__ import annotations

import logging
import math
import netrc
import os
import secrets
import socket
import string
from pathlib import Path
from urllib.parse import urlparse

from rltool.config import WandbLoggerConfig
from rltool.runfolder import layout

ID_FILE = layout.WANDB_ID
_log = logging.getLogger(__name__)


def _warn(msg: str) -> None:
    _log.warning(f"rltool: warning: {msg}")


def _has_api_key(host: str) -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def _reachable(host: str, port: int, timeout: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def resolve_mode(mode: str) -> str:
    """The mode to init with: ``online`` only with an API key and a reachable server. As with
    ``wandb.init(mode=...)``, the config's mode wins over ``WANDB_MODE``."""
    if mode != "online":
        return mode
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    host = url.hostname or "api.wandb.ai"
    port = url.port or (443 if url.scheme == "https" else 80)
    if not _has_api_key(host):
        _warn(
            "logger.wandb.mode=online but no wandb API key (run `wandb login` or set "
            "WANDB_API_KEY); logging offline instead, upload later: wandb sync <run_dir>/wandb"
        )
        return "offline"
    if not _reachable(host, port):
        _warn(
            f"logger.wandb.mode=online but {host}:{port} is unreachable; logging offline "
            "instead, upload later with `wandb sync <run_dir>/wandb`"
        )
        return "offline"
    return "online"


def run_id(run_dir: Path) -> str:
    """The run's wandb id: read from ``run_dir/wandb_id``, or made and stored there."""
    path = Path(run_dir) / ID_FILE
    if path.exists():
        return path.read_text().strip()
    rid = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))
    path.write_text(rid + "\n")
    return rid


def sweep_context() -> tuple[str | None, str | None]:
    """(group, name) from Hydra in a multirun: the sweep folder, the job's overrides."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return None, None
    if hc.mode != RunMode.MULTIRUN:
        return None, None
    return str(hc.sweep.dir), " ".join(hc.overrides.task) or None


class WandbLogger:
    """Logs each row with ``frames`` as its step metric; ``close`` finishes the run."""

    def __init__(self, cfg: WandbLoggerConfig, run_dir: Path, config: dict | None = None):
        import wandb

        self.mode = resolve_mode(cfg.mode)
        group, name = sweep_context()
        kwargs = dict(
            project=cfg.project,
            entity=cfg.entity,
            group=cfg.group or group,
            name=cfg.name or name or Path(run_dir).name,
            tags=list(cfg.tags) or None,
            config=config,
            id=run_id(run_dir),
            resume="allow",
            dir=str(run_dir),
            reinit="finish_previous",  # one process may run several multirun jobs
        )
        try:
            self.run = self._init(wandb, self.mode, cfg, kwargs)
        except Exception as e:  # noqa: BLE001 - e.g. a rejected key or a timeout: go offline
            if self.mode != "online":
                raise
            _warn(f"wandb online init failed ({type(e).__name__}: {e}); logging offline instead")
            self.mode = "offline"
            self.run = self._init(wandb, self.mode, cfg, kwargs)
        self.run.define_metric("frames")
        self.run.define_metric("*", step_metric="frames")

    @staticmethod
    def _init(wandb, mode: str, cfg: WandbLoggerConfig, kwargs: dict):
        settings = wandb.Settings(init_timeout=cfg.init_timeout_s, silent=True)
        return wandb.init(mode=mode, settings=settings, **kwargs)

    def log(self, row: dict) -> None:
        self.run.log({k: v for k, v in row.items() if _finite(v)})

    def close(self) -> None:
        self.run.finish()


def _finite(v) -> bool:
    return not (isinstance(v, float) and not math.isfinite(v))
