"""SAC's update: store the rollout in the replay (DQN's: windows of ``buffer.seq_len`` with the
actor's and the critics' stored states for a recurrent policy, transitions for an MLP); after
``loss.warmup_frames``, ``loss.utd_ratio`` gradient steps on sampled windows, each followed by
the target critics' Polyak step. A checkpoint adds the target critics and their update count
(``sac``) and the replay's folder (``buffer``); alpha is a policy parameter (the model's state,
its moments the optimizer's)."""

from __future__ import annotations

from rltool.algos.base import Algorithm
from rltool.data import make_replay
from rltool.losses import SACLoss


class SAC(Algorithm):
    def __init__(self, cfg, env, policy, run_dir=None):
        super().__init__(cfg, env, policy, run_dir)
        c = cfg.loss
        self.buffer = make_replay(cfg.buffer, c.n_steps, env.num_envs, policy, cfg.seed, run_dir)
        self.loss = SACLoss(
            policy,
            gamma=c.gamma,
            tau=c.tau,
            alpha_init=c.alpha_init,
            target_entropy=c.target_entropy,
            reduction=c.reduction,
            burn_in=self.buffer.burn_in,
        )

    def update(self, batch, progress, frames, step):
        """Logs ``updates``: the gradient steps taken on this batch."""
        c = self.cfg.loss
        self.buffer.extend(batch)
        n = c.utd_ratio if frames >= c.warmup_frames and self.buffer.can_sample() else 0
        for _ in range(n):
            step(self.loss(self.buffer.sample()))
            self.loss.update_target()
        return {"updates": n}

    def state_parts(self):
        return {"sac": self.loss.target}, {"buffer": self.buffer}

    def close(self):
        # a memmap made for this run only is scratch space
        self.buffer.close(delete=self.cfg.buffer.path is None)
