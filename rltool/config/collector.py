"""The ``collector`` and ``buffer`` groups' schemas: how rollouts are gathered, and the replay
of off-policy algorithms."""

from __future__ import annotations

from dataclasses import dataclass

from rltool.config.fields import check, check_fields, choice, ranged


@dataclass
class CollectorConfig:
    # frames per rollout, all envs together (T = this / num_envs): 8 envs x 32 steps
    frames_per_batch: int = ranged(256, ge=1)
    # the device (cpu, cuda, cuda:N, mps) of the env and the policy together; not with
    # env_device / policy_device. For each: null = stay where it is (rltool.collectors.devices)
    device: str | None = None
    env_device: str | None = None  # where the env's tensors live
    policy_device: str | None = None  # where the policy runs
    storing_device: str | None = None  # where rollouts are written (null: the env's device)

    def __post_init__(self):
        check_fields(self, "collector")


@dataclass
class BufferConfig:
    """Replay (off-policy algorithms): transitions for an MLP policy, windows of ``seq_len``
    steps for a recurrent one (the stored state at the first step, ``burn_in`` steps that only
    warm it)."""

    size: int = ranged(100_000, ge=1)  # capacity in transitions (all envs together)
    batch_size: int = ranged(64, ge=1)  # transitions (MLP) or sequences (recurrent) per update
    seq_len: int = 20  # recurrent policies: steps per sampled sequence, burn-in included
    # first steps of each sequence that only warm the state (no loss)
    burn_in: int = ranged(0, ge=0)
    prioritized: bool = False  # prioritized replay (|td error|), with importance weights
    alpha: float = ranged(0.6, ge=0)  # priority exponent
    beta: float = ranged(0.4, ge=0, le=1)  # importance-weight exponent
    # sequence priority: eta * max + (1 - eta) * mean |td error|
    priority_eta: float = ranged(0.9, ge=0, le=1)
    # where the replay lives: memory = RAM, memmap = files on disk (buffer.path) for buffers
    # larger than RAM
    storage: str = choice("memory", ("memory", "memmap"))
    path: str | None = None  # memmap folder; null = <run dir>/replay, deleted at the end

    def __post_init__(self):
        check_fields(self, "buffer")
        check(
            self.seq_len > self.burn_in,
            "buffer.seq_len",
            self.seq_len,
            f"must be larger than buffer.burn_in={self.burn_in} (burn-in steps never enter "
            "the loss)",
        )
