"""The ``distributed`` group's schema: data-parallel training on torch.distributed."""

from __future__ import annotations

from dataclasses import dataclass

from rltool.config.fields import check_fields, choice, ranged


@dataclass
class DistributedConfig:
    """Data-parallel training on torch.distributed (rltool/distributed/ranks.py): each rank collects
    its own rollout, gradients are averaged; 1 = the plain single process."""

    # >1: rltool train starts that many ranks itself (torch elastic)
    nproc_per_node: int = ranged(1, ge=1)
    # auto (gloo on CPU, nccl on CUDA) | gloo | nccl
    backend: str = choice("auto", ("auto", "gloo", "nccl"))
    # a rank silent this long stops the others (> an eval or checkpoint)
    timeout_s: float = ranged(60.0, gt=0)
    # the preemption threshold of Wijmans et al.: once this fraction of the ranks has collected
    # its rollout, the others cut theirs short (after a quarter of it); null: off
    sync_fraction: float | None = ranged(None, gt=0, le=1, null="off")
    # gradients all-reduced in buckets of this size (MB) as backward produces them, overlapping
    # the exchange with the rest of backward (as torch's DDP); null: one buffer after backward
    bucket_mb: float | None = ranged(None, gt=0, null="off")
    # how gradients are summed: auto = through /dev/shm where every rank is on this host and the
    # gradients on the CPU (the same numbers, without gloo's sockets), else all-reduce;
    # off = always the backend's all-reduce
    shared_memory: str = choice("auto", ("auto", "off"))

    def __post_init__(self):
        check_fields(self, "distributed")
