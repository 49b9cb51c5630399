"""A refused command leaves a run folder as it found it: :class:`Before` records what the folder
held before the command touched it, and removes what the command added (Hydra creates the
folder, ``.hydra/`` and ``train.log`` before the config is checked)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from rltool.runfolder import lock as runlock


@dataclasses.dataclass
class Before:
    """What a single run's folder held before this process touched it (:meth:`record`), so
    that a refused command can remove what it added (:meth:`tidy`)."""

    run_dir: Path | None = None
    entries: set[str] | None = None  # its top-level names; None: it did not exist
    top: Path | None = None  # the highest folder of its path that did not exist
    tidied: bool = False

    def record(self, run_dir: Path) -> None:
        if self.run_dir is not None:
            return
        self.run_dir = run_dir = Path(run_dir).resolve()
        if run_dir.is_dir():
            self.entries = {p.name for p in run_dir.iterdir()}
            return
        top = run_dir
        while not top.parent.exists():
            top = top.parent
        self.top = top

    def tidy(self) -> None:
        """Removes what this process added to the run folder (see the module docstring) and puts
        the lock file back as it was. Only while this process holds the folder's lock (never a
        folder another writer holds); once per command."""
        run_dir = self.run_dir
        if run_dir is None or self.tidied or not runlock.held(run_dir):
            return
        self.tidied = True
        if self.entries is None:
            shutil.rmtree(run_dir, ignore_errors=True)
            parent = run_dir.parent
            while self.top is not None and parent != self.top.parent:
                try:
                    parent.rmdir()  # only when empty
                except OSError:
                    break
                parent = parent.parent
            return
        for p in run_dir.iterdir():
            if p.name not in self.entries:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p, ignore_errors=True)
                else:
                    p.unlink(missing_ok=True)
        runlock.undo(run_dir)
