"""``rltool export run=<dir> [checkpoint=best] format=onnx|pt2 [out=...] [outputs=full]``: the
run's policy as one file that runs without rltool (:mod:`rltool.deploy.export`: the I/O
contract)."""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

from rltool.cli.args import help_text, parse, wants_help
from rltool.console import STDOUT
from rltool.errors import UserError

_log = logging.getLogger(__name__)


def _opt(default, help_: str, **more):
    return field(default=default, metadata={"help": help_, **more})


@dataclass
class ExportArgs:
    """rltool export's options (``key=value``, parsed by :mod:`rltool.cli.args`)."""

    run: str = _opt(
        "", "the run folder to export, e.g. run=outputs/2026-12-02/10-11-12", required=True
    )
    checkpoint: str | None = _opt(
        None, "best, or a checkpoint of <run>/checkpoints by name or frames (null: the latest)"
    )
    format: str = _opt(
        "onnx",
        "onnx (onnxruntime; pip install 'rltool[export]') or pt2 (torch.export.load)",
        choices=["onnx", "pt2"],
    )
    out: str | None = _opt(None, "the file written (null: <run>/policy.<format>)")
    outputs: str = _opt(
        "action",
        "action: the greedy action and next state; full: also the distribution and the value",
        choices=["action", "full"],
    )

    def __post_init__(self):
        if not self.run:
            raise UserError(
                "rltool export needs run=<run folder>, e.g. run=outputs/2026-12-02/10-11-12"
            )


USAGE = "rltool export run=<run folder> [format=onnx|pt2] [key=value ...]"
ABOUT = (
    "Writes the run's greedy policy as one ONNX or torch.export (.pt2) file: raw observation, "
    "state and is_init in; action and next state out; any number of envs; the observation "
    "normalisation and env.obs_keep inside (docs/how-to/deploy-a-policy.md: the I/O contract)."
)


def main(argv: list[str]) -> int:
    if wants_help(argv):
        print(help_text(ExportArgs, USAGE, ABOUT))
        return 0
    a = parse(ExportArgs, argv, "export")
    from rltool.deploy.export import export_policy

    # torch's exporters log every op set they skip (torchvision's): not the user's business
    quiet = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export")]
    levels = [q.level for q in quiet]
    for q in quiet:
        q.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():  # torch's own deprecations inside its exporter
            warnings.simplefilter("ignore", FutureWarning)
            path = export_policy(a.run, a.format, a.out, a.checkpoint, a.outputs == "full")
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
    where = "metadata 'rltool'" if a.format == "onnx" else "extra file 'rltool.json'"
    _log.info(
        f"rltool export: wrote {path} ({a.format}; the I/O contract in its {where})", extra=STDOUT
    )
    return 0
