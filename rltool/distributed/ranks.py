"""Data-parallel PPO on torch.distributed (DD-PPO: each rank collects with its own envs, the
gradients are averaged by an all-reduce, so every rank keeps the same parameters).

:class:`Solo` is the plain single process: every hook is the identity, so the loop in
:mod:`rltool.train` is the same code for one process and for many. :class:`Ranks` is one rank of a
process group (``torchrun``, Slurm, or ``rltool train distributed.nproc_per_node=N``, which starts
torch's elastic launcher itself: :mod:`rltool.cli.launch`):

- gradients: one flat buffer per optimizer step, each rank's gradients weighted by its samples
  (:meth:`Ranks.grad_hook`, called between backward and clipping), summed through shared memory
  where every rank is on one host (:mod:`rltool.distributed.shared_sum`), or with
  ``distributed.bucket_mb``
  buckets started while backward runs (:class:`Buckets`);
- frames: ``total_frames`` and the schedules count every rank's frames (:meth:`Ranks.frames`);
- normalisation statistics: merged at every update with Chan's parallel update; each rank adds
  what it saw since the last merge (:meth:`Ranks.merge_stats`);
- one voice: rank 0 alone writes (run folder, metrics, checkpoints); :meth:`Ranks.gather`
  brings every rank's own state (episodes, RNG, running returns) to it for a checkpoint.

With a world of one every collective is skipped: the distributed path computes exactly what the
plain path does.
"""

from __future__ import annotations

import datetime
import math
import os

import numpy as np
import torch
import torch.distributed as dist

from rltool import algos
from rltool.collectors.devices import DEVICE_KEYS, resolve_devices
from rltool.distributed.shared_sum import open_shared_sum
from rltool.errors import EXIT_PEER_LOST, RunStopped, UserError
from rltool.testing import faults as _faults


class Solo:
    """One process, no communication."""

    rank, world, writer = 0, 1, True
    grad_hook = None

    def collect(self, collector):
        """This rank's rollout (see ``distributed.sync_fraction``)."""
        return collector.collect()

    def frames(self, n: int) -> int:
        """Frames collected by all ranks this iteration (``n``: this rank's)."""
        return n

    def merge_stats(self, env) -> None:
        """Merges the env's running normalisation statistics across ranks."""

    def returns(self, returns: torch.Tensor) -> tuple[float, int]:
        """(mean, count) of the episode returns of all ranks (mean nan when none ended)."""
        n = returns.numel()
        return (returns.mean().item() if n else float("nan")), n

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank."""
        return flag

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` on rank 0 (rank order), None on the others."""
        return [obj]

    def share(self, obj):
        """Rank 0's ``obj`` on every rank."""
        return obj

    def attach(self, run) -> None:
        """Called once the run is built and resumed: identical parameters and statistics."""

    def close(self) -> None:
        pass


SOLO = Solo()


class PeerLost(RunStopped):
    """A collective failed: another rank died, hung past ``distributed.timeout_s`` or left."""

    def __init__(self, message: str):
        super().__init__(message, EXIT_PEER_LOST)


def running_stats(env) -> list:
    """The env's running statistics (``RunningMeanStd``): observations, then rewards."""
    out = []
    norm = env.obs_norm
    if norm is not None:
        norms = norm.norms.values() if hasattr(norm, "norms") else [norm]
        out += [n.stats for n in norms]
    if env.reward_scaler is not None:
        out.append(env.reward_scaler.stats)
    return out


def _moments(s) -> np.ndarray:
    """(count, mean, M2) of a RunningMeanStd as one flat float64 row."""
    mean, var = np.ravel(s.mean), np.ravel(s.var)
    return np.concatenate([[s.count], mean, var * s.count])


def delta(now: np.ndarray, base: np.ndarray) -> np.ndarray:
    """The moments of the samples seen since ``base`` (Chan's update run backwards)."""
    d = len(now) // 2
    n1, m1, q1 = now[0], now[1 : 1 + d], now[1 + d :]
    n0, m0, q0 = base[0], base[1 : 1 + d], base[1 + d :]
    n = n1 - n0
    if n <= 0:
        return np.zeros_like(now)
    mean = (n1 * m1 - n0 * m0) / n
    m2 = q1 - q0 - (mean - m0) ** 2 * n0 * n / n1
    return np.concatenate([[n], mean, np.maximum(m2, 0.0)])


def combine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Chan et al.'s parallel update of two (count, mean, M2) rows."""
    d = len(a) // 2
    na, ma, qa = a[0], a[1 : 1 + d], a[1 + d :]
    nb, mb, qb = b[0], b[1 : 1 + d], b[1 + d :]
    if nb <= 0:
        return a
    n = na + nb
    diff = mb - ma
    return np.concatenate([[n], ma + diff * nb / n, qa + qb + diff**2 * na * nb / n])


def _set_moments(s, row: np.ndarray) -> None:
    d = len(row) // 2
    shape = np.shape(s.mean)
    s.count = float(row[0])
    s.mean = row[1 : 1 + d].reshape(shape).copy()
    s.var = (row[1 + d :] / row[0]).reshape(shape).copy()


class Ranks(Solo):
    """This process's rank in the default process group (see :func:`join`)."""

    def __init__(
        self,
        group,
        device: torch.device,
        sync_fraction: float | None = None,
        split=1,
        bucket_mb: float | None = None,
        *,
        shared_memory: str,  # distributed.shared_memory (its default lives in the config)
    ):
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.sync, self.split = sync_fraction, split  # split: minibatches a rollout makes
        self.bucket_mb, self.buckets = bucket_mb, None  # Buckets once attached (overlap on)
        self.shared_memory, self.shared = shared_memory, None  # SharedSum once attached
        self.writer = self.rank == 0
        self.cpu = group  # gloo: counters, statistics, objects (NCCL only moves CUDA tensors)
        self.device = device  # where the gradients are reduced
        self.samples = 1  # this rank's samples in the current rollout: the gradients' weight
        self._base: list[np.ndarray] = []  # the statistics at the last merge, equal on all ranks
        self._iterations = 0

    def collect(self, collector):
        """Cut short once ``sync_fraction`` of the ranks finished theirs (Wijmans et al.'s
        preemption threshold), after at least a quarter of the steps, at a length that still
        splits into the same minibatches: a shared counter in the process group's store."""
        if self.sync is None or self.world == 1:
            return collector.collect()
        store = dist.distributed_c10d._get_default_store()  # the rendezvous' key-value store
        key, need = f"rltool/collected/{self._iterations + 1}", math.ceil(self.sync * self.world)
        quarter, width = max(1, collector.T // 4), collector.B

        def stop(n: int) -> bool:
            _faults.point("dist.env_step", rank=self.rank)
            if n < quarter or (n * width) % self.split:
                return False
            return self._call(store.add, key, 0) >= need

        batch = collector.collect(stop)
        if batch.shape[0] == collector.T:
            self._call(store.add, key, 1)
        if self.writer and self._iterations >= 1:  # every rank is past the previous one's
            store.delete_key(f"rltool/collected/{self._iterations}")
        return batch

    def frames(self, n: int) -> int:
        self.samples = n
        self._iterations += 1
        _faults.point("dist.iteration", rank=self.rank, iteration=self._iterations)
        if self.world == 1:
            return n
        t = torch.tensor([n], dtype=torch.int64)
        self._call(dist.all_reduce, t, group=self.cpu)
        return int(t.item())

    def grad_hook(self, params) -> None:
        if self.world == 1:
            return
        if self.buckets is not None:  # started during backward: wait for them
            self.buckets.finish()
            return
        flat, grads = self.weighted(params)  # one flat buffer: sum of n_r * g_r, and sum of n_r
        if self.shared is not None:
            self.shared.sum_(flat)
        else:
            self._call(dist.all_reduce, flat)
        self.unpack(params, grads, flat)

    def weighted(self, params) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``params``' gradients (zeros where none) times this rank's samples n_r, flat, then
        n_r: the buffer to sum over ranks; and the gradients (their shapes and dtypes)."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]).to(self.device, torch.float32)
        return torch.cat([flat * self.samples, flat.new_tensor([self.samples])]), grads

    @staticmethod
    def unpack(params, grads, flat: torch.Tensor) -> None:
        """Sets each gradient to its slice of the summed buffer over the summed samples: the
        mean of the ranks' gradients weighted by their samples."""
        flat = flat[:-1] / flat[-1]
        offset = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(p).to(p.dtype)
            offset += n

    def merge_stats(self, env) -> None:
        stats = running_stats(env)
        if self.world == 1 or not stats:
            return
        pairs = zip(stats, self._base, strict=True)
        local = np.concatenate([delta(_moments(s), b) for s, b in pairs])
        t = torch.from_numpy(local)
        rows = [torch.empty_like(t) for _ in range(self.world)]
        self._call(dist.all_gather, rows, t, group=self.cpu)
        offset = 0
        for i, (s, base) in enumerate(zip(stats, self._base, strict=True)):
            merged = base
            for r in rows:  # in rank order: every rank computes the same numbers
                merged = combine(merged, r.numpy()[offset : offset + len(base)])
            offset += len(base)
            _set_moments(s, merged)
            self._base[i] = _moments(s)

    def returns(self, returns: torch.Tensor) -> tuple[float, int]:
        if self.world == 1:
            return super().returns(returns)
        t = torch.tensor([returns.sum().item(), returns.numel()], dtype=torch.float64)
        self._call(dist.all_reduce, t, group=self.cpu)
        total, n = t[0].item(), int(t[1].item())
        return (total / n if n else float("nan")), n

    def any(self, flag: bool) -> bool:
        if self.world == 1:
            return flag
        t = torch.tensor([int(flag)])
        self._call(dist.all_reduce, t, op=dist.ReduceOp.MAX, group=self.cpu)
        return bool(t.item())

    def gather(self, obj) -> list | None:
        if self.world == 1:
            return [obj]
        out = [None] * self.world if self.writer else None
        self._call(dist.gather_object, obj, out, dst=0, group=self.cpu)
        return out

    def share(self, obj):
        if self.world == 1:
            return obj
        box = [obj]
        self._call(dist.broadcast_object_list, box, src=0, group=self.cpu)
        return box[0]

    def attach(self, run) -> None:
        if self.world > 1:  # built from the same seed already; rank 0's copy is the reference
            for t in [*run.policy.parameters(), *run.policy.buffers()]:
                self._call(dist.broadcast, t.data, src=0)
        if self.world > 1 and self.bucket_mb is not None and self.buckets is None:
            self.buckets = Buckets(list(run.policy.parameters()), self.bucket_mb, self)
        if self.world > 1 and self.buckets is None and self.shared is None:
            self.shared = self._shared_sum(run.policy)
        stats = running_stats(run.env)
        if run.cfg.resume is None:  # each rank's envs were reset: merge from the statistics' start
            self._base = [_moments(type(s)(np.shape(s.mean))) for s in stats]
            self.merge_stats(run.env)
        else:  # loaded from the checkpoint: the same on every rank
            self._base = [_moments(s) for s in stats]

    def _shared_sum(self, policy):
        """The one-buffer sum through shared memory (``distributed.shared_memory=auto``) where
        every rank is on this host and the gradients on the CPU; None: gloo's or NCCL's."""
        if self.shared_memory != "auto" or self.device.type != "cpu":
            return None
        return open_shared_sum(self, sum(p.numel() for p in policy.parameters()) + 1)

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, dist.DistError) as e:
            first = str(e).strip().splitlines()[0][:120] if str(e).strip() else type(e).__name__
            raise PeerLost(
                f"rank {self.rank}: lost the other ranks during {fn.__name__} ({first}): a rank "
                "died, or hung longer than distributed.timeout_s; the latest checkpoint is intact"
            ) from None

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


def backend_for(cfg, device: torch.device) -> str:
    """gloo on CPU, NCCL when the policy (and so the gradients) live on CUDA."""
    want = cfg.distributed.backend
    if want == "auto":
        return "nccl" if device.type == "cuda" else "gloo"
    if want == "nccl" and device.type != "cuda":
        raise UserError(
            "distributed.backend=nccl needs the policy on CUDA (collector.device=cuda): use "
            "distributed.backend=gloo on CPU"
        )
    return want


def join(cfg) -> Ranks:
    """Joins the process group that torchrun / Slurm / rltool's launcher describe in the
    environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). On CUDA each rank takes
    ``cuda:LOCAL_RANK`` (so ``collector.device=cuda`` means that one)."""
    given = {k: getattr(cfg.collector, k) for k in DEVICE_KEYS}
    device = resolve_devices(**given).policy or torch.device("cpu")
    if not algos.get(cfg.loss.name).data_parallel and int(os.environ["WORLD_SIZE"]) > 1:
        raise UserError(
            f"loss={cfg.loss.name} runs on one process (start it without torchrun, or with "
            f"--nproc-per-node=1); on several: {', '.join(algos.data_parallel())}"
        )
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        device = torch.device("cuda", torch.cuda.current_device())
    backend = backend_for(cfg, device)
    timeout = datetime.timedelta(seconds=cfg.distributed.timeout_s)
    dist.init_process_group(backend, timeout=timeout)
    group = dist.new_group(backend="gloo", timeout=timeout) if backend == "nccl" else None
    spec = algos.get(cfg.loss.name)
    split = spec.rollout_multiple(cfg) if spec.rollout_multiple else 1
    d = cfg.distributed
    return Ranks(group, device, d.sync_fraction, split, d.bucket_mb, shared_memory=d.shared_memory)


class Buckets:
    """Gradients all-reduced in buckets while backward runs (as torch's DDP): the parameters in
    reverse order (about the order backward finishes them) cut into buckets of ``size_mb``. A
    bucket's all-reduce starts (async) once all its gradients are in and every bucket before it
    has started, so every rank issues the same collectives in the same order; a parameter that
    got no gradient holds its bucket back to :meth:`finish` (zeros, as the one-buffer path).
    Each bucket carries n_r, so its sum is computed exactly as the one-buffer path's."""

    def __init__(self, params: list[torch.nn.Parameter], size_mb: float, comm: Ranks):
        self.comm, self.buckets = comm, [[]]
        room, left = size_mb * 2**20 / 4, size_mb * 2**20 / 4  # float32 elements
        for p in reversed(params):
            if self.buckets[-1] and p.numel() > left:
                self.buckets.append([])
                left = room
            self.buckets[-1].append(p)
            left -= p.numel()
        self.index = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        for p in params:
            p.register_post_accumulate_grad_hook(self._ready)
        self._reset()

    def _reset(self) -> None:
        self.missing = [len(b) for b in self.buckets]  # gradients each bucket still waits for
        self.started: list[tuple] = []  # (work, flat buffer, gradients), in bucket order

    def _ready(self, p: torch.nn.Parameter) -> None:
        """Called by autograd once ``p.grad`` holds this backward's gradient."""
        self.missing[self.index[id(p)]] -= 1
        self._start()

    def _start(self) -> None:
        while len(self.started) < len(self.buckets) and self.missing[len(self.started)] <= 0:
            params = self.buckets[len(self.started)]
            flat, grads = self.comm.weighted(params)
            work = self.comm._call(dist.all_reduce, flat, async_op=True)
            self.started.append((work, flat, grads))

    def finish(self) -> None:
        """After backward: starts what is left, waits for every bucket, sets the gradients."""
        self.missing = [0] * len(self.buckets)
        self._start()
        for params, (work, flat, grads) in zip(self.buckets, self.started, strict=True):
            self.comm._call(work.wait)
            self.comm.unpack(params, grads, flat)
        self._reset()
