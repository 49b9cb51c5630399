"""DQN's config: the ``loss`` group's schema for ``loss=dqn`` (``conf/loss/dqn.yaml``), and the
checks DQN makes of the other groups (replay, normalisation)."""

from __future__ import annotations

from dataclasses import dataclass

from rltool.config.fields import check, check_fields, choice, loss_reduction, ranged


@dataclass
class DQNConfig:
    """After rl-zoo's tuned CartPole-v1 DQN, on 8 envs (``conf/loss/dqn.yaml`` sets the
    collector's 128 frames per batch; the rest of a combination's needs are in
    ``conf/tuned/<env>_<policy>_dqn.yaml``)."""

    name: str = "dqn"  # the algorithm (set by loss=dqn)
    # the discount (0.98, not 0.99: docs/notes/dqn-targets.md)
    gamma: float = ranged(0.98, ge=0, le=1)
    # steps of reward before the target bootstraps from Q, cut at episode and sequence ends
    # (3, not 1: docs/notes/dqn-targets.md)
    n_steps: int = ranged(3, ge=1)
    # the target's action is chosen by the online net and valued by the target net, against
    # the overestimate of a plain max
    double_dqn: bool = True
    # the TD error's penalty: l2 = squared, smooth_l1 = Huber (squared within 1, linear beyond)
    loss_function: str = choice("smooth_l1", ("l2", "smooth_l1"))
    reduction: str = loss_reduction()  # mean | sum over the batch
    # how the target net follows the online one: hard = a copy every target_update_every
    # updates, soft = a tau-weighted average after each update
    target_update: str = choice("hard", ("hard", "soft"))
    target_update_every: int = ranged(64, ge=1)  # one copy per collected batch of updates
    # target_update=soft: target <- tau * online + (1 - tau) * target
    tau: float = ranged(0.005, gt=0, le=1)
    utd_ratio: int = ranged(64, ge=1)  # gradient updates per collected batch
    warmup_frames: int = ranged(1000, ge=0)  # frames collected before the first update
    # epsilon-greedy, linear from eps_start to eps_end over eps_frames
    eps_start: float = ranged(1.0, ge=0, le=1)
    # the final epsilon (0.1, not rl-zoo's 0.04: docs/notes/dqn-epsilon.md)
    eps_end: float = ranged(0.1, ge=0, le=1)
    eps_frames: int = ranged(8000, ge=1)  # frames over which epsilon anneals

    def __post_init__(self):
        check_fields(self, "loss")


def check_config(cfg) -> None:
    """Replay keeps old data: running normalisation would leave it on stale scales, and the
    buffer must hold at least one sampled batch and one collected rollout."""
    for key in ("normalize_obs", "normalize_reward"):  # running statistics drift
        check(
            not getattr(cfg.env, key),
            f"env.{key}",
            True,
            f"replay (loss={cfg.loss.name}) would keep data scaled by old running statistics; "
            f"set env.{key}=false",
        )
    b, fpb = cfg.buffer, cfg.collector.frames_per_batch
    window = b.seq_len if cfg.policy.kind != "mlp" else cfg.loss.n_steps
    need = max(b.batch_size * window, fpb, window * cfg.env.num_envs)
    check(
        b.size >= need,
        "buffer.size",
        b.size,
        f"must hold at least one batch ({need} transitions: buffer.batch_size x the "
        f"{window}-step window, and collector.frames_per_batch={fpb}); raise buffer.size",
    )
