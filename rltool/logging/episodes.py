"""The episodes file: one CSV row per finished training episode (``frames``, ``return``), the
returns ``rltool report`` turns into POPGym's MMER (:mod:`rltool.analysis.stats`).

``frames`` is the frame count at the end of the iteration in which the episode ended. A resumed
run appends to the file; rows written after its checkpoint (lost work) stay, and the reader
drops them where the frames go back (:func:`rltool.analysis.stats.read_episodes`)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from rltool import keys as K

COLUMNS = ("frames", "return")


class EpisodesLog:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.exists():
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(COLUMNS)

    def log(self, frames: int, batch) -> None:
        """The returns of the episodes that ended in ``batch`` ([T, B]), at ``frames``."""
        done = batch[K.NEXT, K.DONE].reshape(-1)
        returns = batch[K.NEXT, K.EPISODE_RETURN].reshape(-1)[done].tolist()
        if returns:
            with self.path.open("a", newline="") as f:
                csv.writer(f).writerows((frames, repr(float(r))) for r in returns)
