"""The metrics file: one CSV row per iteration, always written, frame count on every row.

Columns are those of the first row; a row with new keys rewrites the (small) file with the wider
header, so no value is ever dropped."""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path


class CSVLogger:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.columns: list[str] = []
        if self.path.exists():  # continue a file (resume): keep its header
            with self.path.open(newline="") as f:
                self.columns = next(csv.reader(f), [])

    def log(self, row: dict) -> None:
        new = [k for k in row if k not in self.columns]
        if new or not self.path.exists():
            self._rewrite(self.columns + new)
        with self.path.open("a", newline="") as f:
            csv.writer(f).writerow([_cell(row.get(k)) for k in self.columns])

    def _rewrite(self, columns: list[str]) -> None:
        rows = []
        if self.path.exists():
            with self.path.open(newline="") as f:
                rows = list(csv.DictReader(f))
        tmp = self.path.with_suffix(".tmp")
        with tmp.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(rows)
        os.replace(tmp, self.path)
        self.columns = columns

    def close(self) -> None:
        pass


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)
