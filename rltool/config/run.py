"""The whole run's schema (:class:`Config`: the groups, the seed, the budget) and the
``eval`` and ``checkpoint`` keys; the checks across groups (the algorithm's own too)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from rltool import algos
from rltool.config.collector import BufferConfig, CollectorConfig
from rltool.config.distributed import DistributedConfig
from rltool.config.env import EnvConfig
from rltool.config.fields import check, check_fields, ranged
from rltool.config.logger import LoggerConfig
from rltool.config.optim import OptimConfig
from rltool.config.policy import PolicyConfig
from rltool.errors import ConfigError

# every seed a run derives goes to np.random.seed (rltool/train.py's seed_everything: 32 bits),
# torch.manual_seed (64 bits) or gymnasium's reset(seed): numpy's bound holds for all
SEED_LIMIT = 2**32
SEED_WHY = "numpy's legacy seeding takes 32 bits"


@dataclass
class EvalConfig:
    # frames between periodic evaluations; null: 10,000, or total_frames // 5 when the budget is
    # under 50,000 (at least 5 evaluations, then the final one)
    every_frames: int | None = ranged(None, ge=1, null=True)
    episodes: int = ranged(10, ge=1)  # each periodic evaluation
    final_episodes: int = ranged(50, ge=1)  # the final evaluation, at the end of the budget
    seed_offset: int = 1_000_000  # eval envs are seeded with seed + this
    # an evaluation episode is cut (counted in eval/episodes_cut, with a warning) after this many
    # steps; null = the env's time limit, or 10,000 where it has none (rltool/run/evaluation.py)
    max_episode_steps: int | None = ranged(None, ge=1, null=True)

    def __post_init__(self):
        check_fields(self, "eval")


@dataclass
class CheckpointConfig:
    """Checkpoints in <run_dir>/checkpoints, also written at the end and on SIGTERM / SIGINT."""

    # null = only at the end and on a signal
    every_frames: int | None = ranged(50_000, ge=1, null=True)
    keep: int = ranged(3, ge=1)  # the newest this many are kept
    save_best: bool = True  # keep the policy of the best evaluation as checkpoints/best.pt

    def __post_init__(self):
        check_fields(self, "checkpoint")


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
    # seeds python, numpy, torch and the envs (eval envs: + eval.seed_offset); every seed the run
    # derives from it (+ env index, rank x env.num_envs, eval.seed_offset) must be < 2**32
    seed: int = ranged(0, ge=0, lt=SEED_LIMIT, why=SEED_WHY)
    total_frames: int = ranged(100_000, ge=1)  # the budget: env steps of all envs together
    num_threads: int = ranged(1, ge=1)  # torch intra-op threads (1: fastest for these small models)
    # torch.compile the acting step and the loss with its backward, for policy=mlp only (a
    # memory is refused: docs/benchmarks/compiled.md); compiling counts in the run's time, and a
    # failure falls back to eager with one warning
    compile: bool = False

    def __post_init__(self):
        check_fields(self, "")
        check_seeds(self)
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
        check_algorithm(self)


def check_seeds(cfg: Config) -> None:
    """The seeds a run derives (rltool/train.py): rank r's env i ``seed + r * env.num_envs + i``,
    eval env i ``seed + eval.seed_offset + i`` (``eval.episodes`` envs); each must be one numpy
    and gymnasium accept, in [0, 2**32)."""
    offset = cfg.eval.seed_offset
    check(
        cfg.seed + offset >= 0,
        "eval.seed_offset",
        offset,
        f"seed + eval.seed_offset = {cfg.seed + offset} seeds the eval envs, and a seed must be "
        f">= 0: choose eval.seed_offset >= {-cfg.seed}",
    )
    derived = {
        "(distributed.nproc_per_node x env.num_envs - 1)": (
            cfg.distributed.nproc_per_node * cfg.env.num_envs - 1
        ),
        "eval.seed_offset + (eval.episodes - 1)": offset + cfg.eval.episodes - 1,
    }
    what, extra = max(derived.items(), key=lambda kv: kv[1])
    check(
        cfg.seed + extra < SEED_LIMIT,
        "seed",
        cfg.seed,
        f"the run also derives seed + {what} = {cfg.seed + extra}, and every seed must be < "
        f"2**32 ({SEED_WHY}): choose seed <= {SEED_LIMIT - 1 - extra}",
    )


def check_algorithm(cfg: Config) -> None:
    """The algorithm's checks of the whole config: its loss options, the heads it trains (a
    dueling head), its own rule (``AlgoSpec.check``) and whether it runs on several ranks."""
    algo = algos.get(cfg.loss.name)
    if not isinstance(cfg.loss, algo.config):  # loss.name=... set instead of loss=...
        raise ConfigError(
            f"loss.name={algo.name!r} does not match the loss options chosen "
            f"({type(cfg.loss).__name__}): choose the algorithm with loss={algo.name}"
        )
    q_heads = [f"loss={a.name}" for a in algos.specs() if "q" in a.heads]
    check(
        not cfg.policy.dueling or "q" in algo.heads,
        "policy.dueling",
        True,
        f"a dueling head is a Q-network's ({', '.join(q_heads)}), not loss={algo.name}'s; "
        "set policy.dueling=false",
    )
    if algo.check is not None:
        algo.check(cfg)
    check(
        cfg.distributed.nproc_per_node == 1 or algo.data_parallel,
        "distributed.nproc_per_node",
        cfg.distributed.nproc_per_node,
        f"loss={algo.name} runs on one process (set 1); on several: "
        f"{', '.join(algos.data_parallel())}",
    )


EVAL_EVERY = 10_000  # eval.every_frames for budgets of SMALL_BUDGET frames or more
SMALL_BUDGET = 50_000


def default_eval_every(total_frames: int) -> int:
    """``eval.every_frames`` when not set: a fifth of a small budget, so that a short run still
    draws a curve (evaluation draws nothing from the training RNG: the training is the same)."""
    return EVAL_EVERY if total_frames >= SMALL_BUDGET else max(1, total_frames // 5)
