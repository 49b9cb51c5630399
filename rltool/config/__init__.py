"""Typed configs: one dataclass per group, stored in Hydra's ConfigStore.

YAML options live in ``conf/<group>/<name>.yaml`` and start from these schemas, so a typo or a wrong
type fails at composition. Value ranges are checked in ``__post_init__`` when
:func:`rltool.config.store.to_config` turns the composed DictConfig into these objects, before
anything is built (``rltool/config/store.py``: storing them, the conf/ folder, what a resume may
change).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from rltool import algos, memories
from rltool.errors import ConfigError


def check(ok: bool, key: str, value: Any, want: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {want}")


def check_choice(key: str, value: str, options: tuple[str, ...]) -> None:
    check(value in options, key, value, f"choose one of {', '.join(options)}")


def check_reduction(value: str) -> None:
    """``loss.reduction`` of a training run: mean | sum. A gradient step needs a scalar, so the
    loss classes' ``"none"`` (per-element terms) is a library option for a user's own loop."""
    check(
        value in ("mean", "sum"),
        "loss.reduction",
        value,
        "choose mean or sum (a training step needs a scalar loss; reduction='none' is an "
        "option of the loss classes for your own loop, rltool.losses)",
    )


# env.suite -> (the package that registers its envs, how a short env.id becomes a full one); gym:
# env.id as given. The one list of suites (rltool/envs/factory.py resolves ids with it).
ENV_SUITES: dict[str, tuple[str, str] | None] = {
    "gym": None,
    "popgym": ("popgym", "popgym-{}-v0"),
    "minigrid": ("minigrid", "MiniGrid-{}-v0"),
    "atari": ("ale_py", "ALE/{}-v5"),
}


@dataclass
class EnvConfig:
    id: str = "CartPole-v1"  # a gymnasium id, module:Id for a user's env, or a suite's short name
    # how a short env.id is read: gym (as given) | popgym (RepeatPreviousEasy ->
    # popgym:popgym-RepeatPreviousEasy-v0) | minigrid (MemoryS7 -> minigrid:MiniGrid-MemoryS7-v0)
    # | atari (Pong -> ale_py:ALE/Pong-v5, with gymnasium's AtariPreprocessing)
    suite: str = "gym"
    kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments of gym.make
    num_envs: int = 8  # envs stepped together (the B of [T, B])
    backend: str = "sync"  # sync | async (gymnasium's) | envpool (pip install 'rltool[envpool]')
    # indices of the flat observation that the agent sees; null = all (a POMDP mask otherwise)
    obs_keep: list[int] | None = None
    # entries of a Dict / Tuple observation that the agent sees (Tuple: "0", "1", ...; nested:
    # "outer.inner"); null = all but text
    obs_keys: list[str] | None = None
    # what image entries hold: pixels (intensities, scaled to [0, 1] in the policy) or symbolic
    # (codes such as MiniGrid's object / colour / state, embedded per channel); never guessed
    image: str = "pixels"
    max_episode_steps: int | None = None  # a time limit (truncation); null: the env's own
    # the last this many observations stacked on a new first axis (1: none); env=atari: mlp only
    frame_stack: int = 1
    normalize_obs: bool = False  # scale observations by running mean and variance
    # the running observation statistics learn from this many frames, then stay fixed (null:
    # always): later, the policy's own drift would move them and shift what it sees
    normalize_obs_frames: int | None = None
    normalize_reward: bool = False  # scale rewards by the running std of discounted returns
    clip_obs: float = 10.0  # normalised observations are clipped to [-this, this]
    # each step's observations against the declared space (shape, bounds, Discrete range):
    # auto = the first reset and 100 vector steps, always = every step, never; NaN / inf in an
    # observation or a reward is always caught (rltool/envs/faults.py)
    check: str = "auto"
    # valid actions each step: auto (an action_mask Dict entry, an action_masks() method or
    # info["action_mask"]; none found: every action valid) | obs:<entry> | info:<key> |
    # method:<name> | none (ignored)
    action_mask: str = "auto"

    def __post_init__(self):
        check(bool(self.id), "env.id", self.id, "give a gymnasium id, e.g. env.id=CartPole-v1")
        check_choice("env.check", self.check, ("auto", "always", "never"))
        kind, _, name = self.action_mask.partition(":")
        check(
            self.action_mask in ("auto", "none") or (kind in ("obs", "info", "method") and name),
            "env.action_mask",
            self.action_mask,
            "choose auto, none, obs:<entry>, info:<key> or method:<name>",
        )
        check(self.num_envs >= 1, "env.num_envs", self.num_envs, "needs at least 1 env")
        check_choice("env.backend", self.backend, ("sync", "async", "envpool"))
        check(self.clip_obs > 0, "env.clip_obs", self.clip_obs, "must be > 0")
        check_choice("env.image", self.image, ("pixels", "symbolic"))
        check_choice("env.suite", self.suite, tuple(ENV_SUITES))
        check(self.frame_stack >= 1, "env.frame_stack", self.frame_stack, "must be >= 1")
        if self.normalize_obs_frames is not None:
            check(
                self.normalize_obs_frames >= 1,
                "env.normalize_obs_frames",
                self.normalize_obs_frames,
                "must be >= 1 or null",
            )
        check(
            self.backend != "envpool" or (self.suite != "atari" and self.frame_stack == 1),
            "env.backend",
            self.backend,
            "env=atari's preprocessing and env.frame_stack are gymnasium wrappers: use "
            "env.backend=sync or async",
        )
        if self.max_episode_steps is not None:
            check(
                self.max_episode_steps >= 1,
                "env.max_episode_steps",
                self.max_episode_steps,
                "must be >= 1 or null",
            )


@dataclass
class PolicyConfig:
    # mlp (no memory) | lstm | gru | mingru | ffm | trxl | <python.module>:<name> (a user's)
    kind: str = "mlp"
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # MLP torso / heads
    encoder_sizes: list[int] = field(default_factory=list)  # MLP before the RNN
    hidden_size: int = 64  # memory width (RNN hidden size, TrXL model width)
    num_layers: int = 1  # memory layers
    shared_torso: bool = False  # critic shares the actor's torso (and RNN)
    # what the policy reads each step: observation, and prev_action / prev_reward (zero at is_init)
    inputs: list[str] = field(default_factory=lambda: ["observation"])
    recurrent_mode: str = "auto"  # auto | sequential
    activation: str = "tanh"  # tanh | relu
    init_log_std: float = 0.0  # Gaussian heads (continuous actions): the initial log std
    dueling: bool = False  # Q heads only: Q = V + A - mean(A)
    # image observations: auto = the Nature CNN from 64 px up, a small 2x2 stack below
    cnn: str = "auto"  # auto | small | nature
    cnn_features: int = 256  # the linear layer after the convolutions
    embed_dim: int = 8  # symbolic images (env.image=symbolic): embedding width per channel
    # the memory's own keys (rltool/memories.py: the spec of policy.kind), listed in
    # conf/policy/<kind>.yaml; a plain mapping here, the spec's dataclass after the checks
    memory: Any = None

    def __post_init__(self):
        for n in [*self.hidden_sizes, *self.encoder_sizes]:
            check(n >= 1, "policy.hidden_sizes", n, "layer sizes must be >= 1")
        check(self.hidden_size >= 1, "policy.hidden_size", self.hidden_size, "must be >= 1")
        check(self.num_layers >= 1, "policy.num_layers", self.num_layers, "must be >= 1")
        check_choice("policy.recurrent_mode", self.recurrent_mode, ("auto", "sequential"))
        check_choice("policy.activation", self.activation, ("tanh", "relu"))
        for name in self.inputs:
            check_choice("policy.inputs", name, ("observation", "prev_action", "prev_reward"))
        check(
            "observation" in self.inputs, "policy.inputs", self.inputs, "must include observation"
        )
        check_choice("policy.cnn", self.cnn, ("auto", "small", "nature"))
        check(self.cnn_features >= 1, "policy.cnn_features", self.cnn_features, "must be >= 1")
        check(self.embed_dim >= 1, "policy.embed_dim", self.embed_dim, "must be >= 1")
        self._check_memory()

    def _check_memory(self):
        """``memory`` -> the dataclass of ``kind``'s spec (rltool/memories.py), then the spec's
        own check; mlp has no memory (None, or an empty mapping)."""
        if self.kind == memories.NO_MEMORY:
            check(
                not self.memory,
                "policy.memory",
                self.memory,
                "an mlp policy has no memory: choose policy=mlp (not policy.kind=mlp alone)",
            )
            self.memory = None
            return
        spec = memories.get(self.kind)
        self.memory = memories.memory_config(spec, self.memory)
        if spec.check is not None:
            spec.check(self)


@dataclass
class BufferConfig:
    """Replay (off-policy algorithms): transitions for an MLP policy, windows of ``seq_len``
    steps for a recurrent one (the stored state at the first step, ``burn_in`` steps that only
    warm it)."""

    size: int = 100_000  # capacity in transitions (all envs together)
    batch_size: int = 64  # transitions (MLP) or sequences (recurrent) per update
    seq_len: int = 20  # recurrent policies: steps per sampled sequence, burn-in included
    burn_in: int = 0  # first steps of each sequence that only warm the state (no loss)
    prioritized: bool = False  # prioritized replay (|td error|), with importance weights
    alpha: float = 0.6  # priority exponent
    beta: float = 0.4  # importance-weight exponent
    priority_eta: float = 0.9  # sequence priority: eta * max + (1 - eta) * mean |td error|
    storage: str = "memory"  # memory | memmap
    path: str | None = None  # memmap folder; null = <run dir>/replay, deleted at the end

    def __post_init__(self):
        check(self.size >= 1, "buffer.size", self.size, "must be >= 1")
        check(self.batch_size >= 1, "buffer.batch_size", self.batch_size, "must be >= 1")
        check(self.burn_in >= 0, "buffer.burn_in", self.burn_in, "must be >= 0")
        check(
            self.seq_len > self.burn_in,
            "buffer.seq_len",
            self.seq_len,
            f"must be larger than buffer.burn_in={self.burn_in} (burn-in steps never enter "
            "the loss)",
        )
        check(self.alpha >= 0, "buffer.alpha", self.alpha, "must be >= 0")
        check(0 <= self.beta <= 1, "buffer.beta", self.beta, "must be in [0, 1]")
        check(0 <= self.priority_eta <= 1, "buffer.priority_eta", self.priority_eta, "in [0, 1]")
        check_choice("buffer.storage", self.storage, ("memory", "memmap"))


@dataclass
class CollectorConfig:
    # frames per rollout, all envs together (T = this / num_envs): 8 envs x 32 steps
    frames_per_batch: int = 256
    # devices (cpu, cuda, cuda:N, mps); null = stay where it is (rltool.collectors.devices)
    device: str | None = None  # env and policy together; not with env_device / policy_device
    env_device: str | None = None  # where the env's tensors live
    policy_device: str | None = None  # where the policy runs
    storing_device: str | None = None  # where rollouts are written (null: the env's device)

    def __post_init__(self):
        check(
            self.frames_per_batch >= 1,
            "collector.frames_per_batch",
            self.frames_per_batch,
            "must be >= 1",
        )


@dataclass
class OptimConfig:
    lr: float = 1e-3  # Adam's learning rate
    eps: float = 1e-5  # Adam's epsilon
    anneal_lr: bool = True  # linear decay to 0 over total_frames
    max_grad_norm: float | None = 0.5  # clip the gradient's global norm; null: no clipping
    # steps with a non-finite loss or gradient are skipped; this many in a row stop the run
    max_nonfinite_steps: int = 10
    # Adam's fused kernel (CPU, CUDA; elsewhere foreach): ~3x faster steps, the same algorithm,
    # but the last bit of its rounding differs, so a seed's run ends elsewhere than the published
    # tables' (measured with foreach). Off until those populations are measured again with it.
    fused: bool = False

    def __post_init__(self):
        check(self.lr > 0, "optim.lr", self.lr, "must be > 0")
        check(self.eps > 0, "optim.eps", self.eps, "must be > 0")
        if self.max_grad_norm is not None:
            check(
                self.max_grad_norm > 0,
                "optim.max_grad_norm",
                self.max_grad_norm,
                "must be > 0 or null",
            )
        check(
            self.max_nonfinite_steps >= 1,
            "optim.max_nonfinite_steps",
            self.max_nonfinite_steps,
            "must be >= 1",
        )


@dataclass
class CSVLoggerConfig:
    filename: str = "metrics.csv"  # always written, in the run directory


@dataclass
class WandbLoggerConfig:
    enabled: bool = False  # logger=[csv,wandb] turns it on
    mode: str = "online"  # online | offline | disabled; online falls back to offline without
    # an API key or network (never blocks)
    project: str = "rltool"
    entity: str | None = None  # the wandb team or user; null: the account's default
    group: str | None = None  # null: the sweep folder in a multirun (one group per sweep)
    name: str | None = None  # null: the job's overrides in a multirun, else the run folder
    tags: list[str] = field(default_factory=list)  # wandb run tags
    init_timeout_s: float = 30.0  # online only

    def __post_init__(self):
        check_choice("logger.wandb.mode", self.mode, ("online", "offline", "disabled"))
        check(
            self.init_timeout_s > 0,
            "logger.wandb.init_timeout_s",
            self.init_timeout_s,
            "must be > 0",
        )


@dataclass
class TensorBoardLoggerConfig:
    enabled: bool = False  # logger=[csv,tensorboard] turns it on
    subdir: str = "tensorboard"  # event files go to <run_dir>/<subdir>


@dataclass
class LoggerConfig:
    csv: CSVLoggerConfig = field(default_factory=CSVLoggerConfig)
    wandb: WandbLoggerConfig = field(default_factory=WandbLoggerConfig)
    tensorboard: TensorBoardLoggerConfig = field(default_factory=TensorBoardLoggerConfig)
    progress: str = "auto"  # auto (bar on a terminal, lines otherwise) | lines | none
    every_s: float = 5.0  # plain progress lines at most this often

    def __post_init__(self):
        check_choice("logger.progress", self.progress, ("auto", "lines", "none"))
        check(self.every_s >= 0, "logger.every_s", self.every_s, "must be >= 0")


@dataclass
class EvalConfig:
    # null: 10,000, or total_frames // 5 when the budget is under 50,000 (at least 5 evaluations
    # and the final one; runs of 50,000 frames or more evaluate as before)
    every_frames: int | None = None
    episodes: int = 10  # each periodic evaluation
    final_episodes: int = 50  # the final evaluation, at the end of the budget
    seed_offset: int = 1_000_000  # eval envs are seeded with seed + this
    # an evaluation episode is cut (counted in eval/episodes_cut, with a warning) after this many
    # steps; null = the env's time limit, or 10,000 where it has none (rltool/run/evaluation.py)
    max_episode_steps: int | None = None

    def __post_init__(self):
        if self.max_episode_steps is not None:
            check(
                self.max_episode_steps >= 1,
                "eval.max_episode_steps",
                self.max_episode_steps,
                "must be >= 1 or null",
            )
        if self.every_frames is not None:
            check(self.every_frames >= 1, "eval.every_frames", self.every_frames, "must be >= 1")
        check(self.episodes >= 1, "eval.episodes", self.episodes, "must be >= 1")
        check(self.final_episodes >= 1, "eval.final_episodes", self.final_episodes, "must be >= 1")


@dataclass
class CheckpointConfig:
    """Checkpoints in <run_dir>/checkpoints, also written at the end and on SIGTERM / SIGINT."""

    every_frames: int | None = 50_000  # null = only at the end and on a signal
    keep: int = 3  # the newest this many are kept
    save_best: bool = True  # keep the policy of the best evaluation as checkpoints/best.pt

    def __post_init__(self):
        if self.every_frames is not None:
            check(
                self.every_frames >= 1,
                "checkpoint.every_frames",
                self.every_frames,
                "must be >= 1 or null",
            )
        check(self.keep >= 1, "checkpoint.keep", self.keep, "must be >= 1")


@dataclass
class DistributedConfig:
    """Data-parallel training on torch.distributed (rltool/distributed/ranks.py): each rank collects
    its own rollout, gradients are averaged; 1 = the plain single process."""

    nproc_per_node: int = 1  # >1: rltool train starts that many ranks itself (torch elastic)
    backend: str = "auto"  # auto (gloo on CPU, nccl on CUDA) | gloo | nccl
    timeout_s: float = 60.0  # a rank silent this long stops the others (> an eval or checkpoint)
    # the preemption threshold of Wijmans et al.: once this fraction of the ranks has collected
    # its rollout, the others cut theirs short (after a quarter of it); null: off
    sync_fraction: float | None = None
    # gradients all-reduced in buckets of this size (MB) as backward produces them, overlapping
    # the exchange with the rest of backward (as torch's DDP); null: one buffer after backward
    bucket_mb: float | None = None
    # the one-buffer sum through /dev/shm where every rank is on this host and the gradients on
    # the CPU (the same numbers, without gloo's sockets); off: gloo's all-reduce
    shared_memory: str = "auto"

    def __post_init__(self):
        check(self.nproc_per_node >= 1, "distributed.nproc_per_node", self.nproc_per_node, ">= 1")
        check_choice("distributed.backend", self.backend, ("auto", "gloo", "nccl"))
        check_choice("distributed.shared_memory", self.shared_memory, ("auto", "off"))
        check(self.timeout_s > 0, "distributed.timeout_s", self.timeout_s, "must be > 0")
        if self.sync_fraction is not None:
            check(
                0 < self.sync_fraction <= 1,
                "distributed.sync_fraction",
                self.sync_fraction,
                "must be in (0, 1] or null (off)",
            )
        if self.bucket_mb is not None:
            check(
                self.bucket_mb > 0,
                "distributed.bucket_mb",
                self.bucket_mb,
                "must be > 0 or null (off)",
            )


@dataclass
class Config:
    env: EnvConfig = MISSING
    policy: PolicyConfig = MISSING
    loss: Any = MISSING  # the chosen algorithm's config (rltool.algos), by the loss group
    collector: CollectorConfig = MISSING
    buffer: BufferConfig = MISSING
    optim: OptimConfig = MISSING
    logger: LoggerConfig = MISSING
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    resume: str | None = None  # a run folder to continue (rltool train resume=<run_dir>)
    seed: int = 0  # seeds python, numpy, torch and the envs (eval envs: + eval.seed_offset)
    total_frames: int = 100_000  # the budget: env steps of all envs together
    num_threads: int = 1  # torch intra-op threads (1: fastest for these small models)
    # torch.compile the acting step and the loss with its backward (rltool/run/compile.py), for
    # policy=mlp; the compilation (~1 min on a CPU) counts in the run's time; a failure: one
    # warning, eager
    compile: bool = False

    def __post_init__(self):
        check(self.total_frames >= 1, "total_frames", self.total_frames, "must be >= 1")
        check(self.num_threads >= 1, "num_threads", self.num_threads, "must be >= 1")
        check(self.seed >= 0, "seed", self.seed, "must be >= 0")
        if self.eval.every_frames is None:
            self.eval.every_frames = default_eval_every(self.total_frames)
        fpb, n = self.collector.frames_per_batch, self.env.num_envs
        check(
            fpb % n == 0,
            "collector.frames_per_batch",
            fpb,
            f"must be a multiple of env.num_envs={n}",
        )
        check(
            not self.compile or self.policy.kind == "mlp",
            "compile",
            True,
            "compiles policies without a memory only, for now: with one, 3 compiled LSTM runs "
            "learned worse than eager, not yet explained (docs/benchmarks/compiled.md); set "
            "compile=false",
        )
        algo = algos.get(self.loss.name)
        if not isinstance(self.loss, algo.config):  # loss.name=... set instead of loss=...
            raise ConfigError(
                f"loss.name={algo.name!r} does not match the loss options chosen "
                f"({type(self.loss).__name__}): choose the algorithm with loss={algo.name}"
            )
        q_heads = [f"loss={a.name}" for a in algos.specs() if "q" in a.heads]
        check(
            not self.policy.dueling or "q" in algo.heads,
            "policy.dueling",
            True,
            f"a dueling head is a Q-network's ({', '.join(q_heads)}), not loss={algo.name}'s; "
            "set policy.dueling=false",
        )
        if algo.check is not None:
            algo.check(self)
        check(
            self.distributed.nproc_per_node == 1 or algo.data_parallel,
            "distributed.nproc_per_node",
            self.distributed.nproc_per_node,
            f"loss={algo.name} runs on one process (set 1); on several: "
            f"{', '.join(algos.data_parallel())}",
        )


EVAL_EVERY = 10_000  # eval.every_frames for budgets of SMALL_BUDGET frames or more
SMALL_BUDGET = 50_000


def default_eval_every(total_frames: int) -> int:
    """``eval.every_frames`` when not set: a fifth of a small budget, so that a short run still
    draws a curve (evaluation draws nothing from the training RNG: the training is the same)."""
    return EVAL_EVERY if total_frames >= SMALL_BUDGET else max(1, total_frames // 5)
