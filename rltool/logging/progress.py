"""Console progress: a live line on a terminal, plain lines otherwise. Both at INFO of this
module's logger: the plain lines are its records, the live line is written to the terminal itself
(one line rewritten in place) only while the logger lets INFO through."""

from __future__ import annotations

import logging
import math
import sys
import time

_log = logging.getLogger(__name__)


def _fmt_eta(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _num(x, fmt="{:.1f}") -> str:
    return fmt.format(x) if x is not None and math.isfinite(x) else "-"


class ProgressLogger:
    """Shows frames, frames/s, mean training return, last eval and ETA."""

    def __init__(self, total_frames: int, mode: str = "auto", every_s: float = 5.0):
        self.stream = sys.stderr  # the live line's terminal
        self.total, self.every_s, self.start = total_frames, every_s, time.perf_counter()
        live = mode == "auto" and self.stream.isatty()
        self.mode = "none" if mode == "none" else ("live" if live else "lines")
        self._last_print, self._last_eval, self._last_return = -math.inf, None, None

    def log(self, row: dict) -> None:
        if self.mode == "none":
            return
        if row.get("eval/return_mean") is not None and math.isfinite(row["eval/return_mean"]):
            self._last_eval = row["eval/return_mean"]
        if row.get("train/return_mean") is not None and math.isfinite(row["train/return_mean"]):
            self._last_return = row["train/return_mean"]  # batches without an episode end keep it
        if not _log.isEnabledFor(logging.INFO):
            return
        frames, now = row["frames"], time.perf_counter()
        elapsed = now - self.start
        fps = row.get("fps", frames / max(elapsed, 1e-9))
        eta = max(self.total - frames, 0) / fps if fps > 0 else math.inf
        line = (
            f"frames {frames:,}/{self.total:,} ({100 * frames / self.total:3.0f}%) | "
            f"{fps:,.0f} fps | return {_num(self._last_return)} | "
            f"eval {_num(self._last_eval)} | ETA {_fmt_eta(eta)}"
        )
        final = frames >= self.total
        if self.mode == "live":
            self.stream.write("\r" + line.ljust(100) + ("\n" if final else ""))
            self.stream.flush()
        elif final or "eval/return_mean" in row or now - self._last_print >= self.every_s:
            _log.info(line)
            self._last_print = now

    def close(self) -> None:
        pass
