"""TensorBoard event files, one scalar per metric, the frame count as the step."""

from __future__ import annotations

import math
from pathlib import Path

from rltool.config import TensorBoardLoggerConfig


class TensorBoardLogger:
    def __init__(self, cfg: TensorBoardLoggerConfig, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / cfg.subdir))

    def log(self, row: dict) -> None:
        frames = int(row["frames"])
        for k, v in row.items():
            if k != "frames" and isinstance(v, int | float) and math.isfinite(v):
                self.writer.add_scalar(k, v, global_step=frames)

    def close(self) -> None:
        self.writer.close()
