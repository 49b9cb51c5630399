"""Training timed in CPU seconds, evaluation apart: a busy machine slows every side alike, so
benchmarks that share it compare CPU time, not wall time."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import rltool.train as train_module


def train_cpu(cfg) -> tuple[dict, float, float]:
    """Trains ``cfg`` in a temporary folder: (its summary, the CPU seconds of training without
    the evaluations, the CPU seconds of the evaluations)."""
    spent = [0.0]
    evaluate = train_module.evaluate

    def timed(*args, **kwargs):
        t = time.process_time()
        try:
            return evaluate(*args, **kwargs)
        finally:
            spent[0] += time.process_time() - t

    train_module.evaluate = timed
    try:
        with tempfile.TemporaryDirectory() as d:
            t0 = time.process_time()
            summary = train_module.train(cfg, Path(d))
            total = time.process_time() - t0
    finally:
        train_module.evaluate = evaluate
    return summary, total - spent[0], spent[0]
