"""The metrics file: one CSV row per iteration, always written, frame count on every row.

Columns are those of the first row; a row with new keys rewrites the (small) file with the wider
header, so no value is ever dropped. A row the disk has no room for is taken back whole (an
:class:`~rltool.errors.OSFault`), so the file ends with complete rows only."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

from rltool.runfolder.writes import atomic_write, writing


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
        line = io.StringIO()
        csv.writer(line).writerow([_cell(row.get(k)) for k in self.columns])
        with writing(self.path), self.path.open("ab", buffering=0) as f:
            end = f.tell()
            try:
                f.write(line.getvalue().encode())
            except OSError:
                f.truncate(end)  # no half row
                raise

    def _rewrite(self, columns: list[str]) -> None:
        rows = []
        if self.path.exists():
            with self.path.open(newline="") as f:
                rows = list(csv.DictReader(f))
        text = io.StringIO()
        w = csv.DictWriter(text, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
        atomic_write(self.path, lambda f: f.write(text.getvalue().encode()))
        self.columns = columns

    def close(self) -> None:
        pass


def _cell(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return repr(v) if isinstance(v, float) else str(v)
