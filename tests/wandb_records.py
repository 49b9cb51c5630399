"""Reads the records of an offline wandb run file (``run-<id>.wandb``): a 7-byte header, then
LevelDB-log framed protobuf records in 32 KiB blocks (the format wandb's own reader uses)."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path

from wandb.proto import wandb_internal_pb2 as pb

BLOCK, HEADER = 32768, 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(path: Path, timeout_s: float = 30.0) -> list:
    """The file's records, once it holds the run's exit record: wandb's service process writes
    the file and, on a loaded machine, can still be flushing it after ``run.finish()`` returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        out = _parse(Path(path).read_bytes())
        if any(r.WhichOneof("record_type") == "exit" for r in out) or time.monotonic() > deadline:
            return out
        time.sleep(0.2)


def _parse(data: bytes) -> list:
    assert data[:4] == b":W&B", "not a wandb run file"
    pos, out, buf = HEADER, [], b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        if pos + HEADER + length > len(data):  # a record still being written
            break
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        buf = chunk if kind in (FULL, FIRST) else buf + chunk
        if kind in (FULL, LAST):
            r = pb.Record()
            r.ParseFromString(buf)
            out.append(r)
    return out


def history(path: Path) -> list[dict]:
    """Each logged row as {key: value}."""
    return [
        {"/".join(i.nested_key) or i.key: json.loads(i.value_json) for i in r.history.item}
        for r in records(path)
        if r.WhichOneof("record_type") == "history"
    ]


def run_record(path: Path):
    return next(r.run for r in records(path) if r.WhichOneof("record_type") == "run")


def config(path: Path) -> dict:
    return {
        i.key: json.loads(i.value_json) for i in run_record(path).config.update if i.key != "_wandb"
    }


def step_metrics(path: Path) -> dict[str, str]:
    """define_metric records: {name or glob: step metric}."""
    return {
        (r.metric.name or r.metric.glob_name): r.metric.step_metric
        for r in records(path)
        if r.WhichOneof("record_type") == "metric"
    }
