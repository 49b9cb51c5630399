"""Checkpoint files: atomic writes under kills, the latest pointer, pruning, safe loading."""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest
import torch

from rltool.errors import UserError
from rltool.run import checkpoint as ckpt
from rltool.testing import faults as _faults


def _writer(directory: Path, n: int, kill_at: str | None = None) -> int:
    """Forks a child that writes checkpoints 1..n (0 = forever) into ``directory``, each with a
    1 MB tensor; returns its pid. A fork keeps the tests fast (no new interpreter, no imports)."""
    pid = os.fork()
    if pid:
        return pid
    try:  # the child: never returns into pytest
        torch.set_num_threads(1)
        if kill_at:
            os.environ["RLTOOL_CHECKPOINT_KILL"] = kill_at
        _faults._writes = 0
        i = 0
        while n == 0 or i < n:
            i += 1
            ckpt.save(directory, i, {"i": i, "w": torch.full((256, 1024), float(i))}, keep=2)
    finally:
        os._exit(0)


def _wait(pid: int) -> int:
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def _check_loadable(directory: Path) -> int:
    path = ckpt.latest(directory)
    body = ckpt.load(path)
    assert body["i"] == int(path.stem.split("-")[1])
    assert torch.equal(body["w"], torch.full((256, 1024), float(body["i"])))
    return body["i"]


class Folder:
    """A toy folder saver (the replay buffer's protocol)."""

    def __init__(self, value: int):
        self.value = value

    def save(self, path: Path) -> None:
        path.mkdir()
        (path / "value.txt").write_text(str(self.value))

    def load(self, path: Path) -> None:
        self.value = int((path / "value.txt").read_text())


def test_roundtrip_pointer_keep_and_folders(tmp_path):
    for frames in (100, 200, 300, 400):
        ckpt.save(tmp_path, frames, {"x": torch.tensor([frames])}, {"buf": Folder(frames)}, keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == [
        "ckpt-000000000300.buf",
        "ckpt-000000000300.pt",
        "ckpt-000000000400.buf",
        "ckpt-000000000400.pt",
        "latest",
    ]
    path = ckpt.latest(tmp_path)
    body = ckpt.load(path)
    assert path.name == "ckpt-000000000400.pt" and body["x"].item() == 400
    assert body["version"] == ckpt.VERSION and body["folders"] == ["buf"]
    target = Folder(0)
    ckpt.load_folders(path, {"buf": target})
    assert target.value == 400


def test_a_resumed_run_drops_the_checkpoints_of_its_abandoned_future(tmp_path):
    for frames in (100, 200, 300):
        ckpt.save(tmp_path, frames, {}, keep=5)
    ckpt.save(tmp_path, 150, {}, keep=5)  # resumed from 100: 200 and 300 belong to another past
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == [
        "ckpt-000000000100.pt",
        "ckpt-000000000150.pt",
    ]


@pytest.mark.parametrize("point", _faults.CHECKPOINT_STEPS)
def test_kill_at_each_point_of_a_write_leaves_the_previous_checkpoint(tmp_path, point):
    assert _wait(_writer(tmp_path, 2, kill_at=f"{point}@2")) == -signal.SIGKILL
    assert _check_loadable(tmp_path) == 1  # the pointer still names checkpoint 1
    ckpt.save(tmp_path, 3, {"i": 3, "w": torch.full((256, 1024), 3.0)}, keep=2)  # and writes go on
    assert _check_loadable(tmp_path) == 3
    assert not list(tmp_path.glob(".*tmp*")), "the next write cleans what the killed one left"


def test_sigkill_at_random_moments_always_leaves_a_loadable_latest(tmp_path):
    rng = random.Random(0)
    for trial in range(6):
        d = tmp_path / str(trial)
        pid = _writer(d, 0)
        deadline = time.monotonic() + 60
        while not (d / "latest").exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(pid, signal.SIGKILL)
        assert _wait(pid) == -signal.SIGKILL
        assert _check_loadable(d) >= 1


def test_a_pickle_payload_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    path = tmp_path / "ckpt-000000000001.pt"
    torch.save({"format": ckpt.FORMAT, "version": ckpt.VERSION, "x": Payload()}, path)
    with pytest.raises(UserError, match=r"pickled Python object \(\w+\.system\).*refused"):
        ckpt.load(path)
    assert not marker.exists()


def test_truncated_corrupted_and_foreign_files_are_one_clear_error(tmp_path):
    ckpt.save(tmp_path, 1, {"w": torch.zeros(1000)})
    path = ckpt.latest(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UserError, match="truncated or not an rltool checkpoint"):
        ckpt.load(path)
    path.write_bytes(data[:-200] + bytes(200))  # a damaged central directory
    with pytest.raises(UserError, match="truncated"):
        ckpt.load(path)
    torch.save({"w": torch.zeros(3)}, path)
    with pytest.raises(UserError, match="is not an rltool checkpoint"):
        ckpt.load(path)
    torch.save({"format": ckpt.FORMAT, "version": 0}, path)
    with pytest.raises(UserError, match="format version 0; this rltool reads version 1"):
        ckpt.load(path)
    (tmp_path / "latest").write_text("../../etc/passwd\n")
    with pytest.raises(UserError, match="'latest'.*is corrupted|is corrupted"):
        ckpt.latest(tmp_path)


def test_a_missing_folder_of_a_checkpoint_is_reported(tmp_path):
    ckpt.save(tmp_path, 1, {}, {"buf": Folder(1)})
    (tmp_path / "ckpt-000000000001.buf" / "value.txt").unlink()
    (tmp_path / "ckpt-000000000001.buf").rmdir()
    with pytest.raises(UserError, match="incomplete: its folder ckpt-000000000001.buf is missing"):
        ckpt.load(ckpt.latest(tmp_path))
