"""PPO's update: GAE over the rollout, then ``epochs`` passes of ``num_minibatches`` minibatches
(whole env columns for a recurrent policy), one gradient step each."""

from __future__ import annotations

from rltool.algos.base import Algorithm
from rltool.data import minibatches, resolve_sampler
from rltool.losses import PPOLoss, add_gae


class PPO(Algorithm):
    def __init__(self, cfg, env, policy, run_dir=None):
        super().__init__(cfg, env, policy, run_dir)
        c = cfg.loss
        self.sampler = resolve_sampler(c.sampler, recurrent=bool(policy.state_specs))
        self.loss = PPOLoss(
            policy,
            clip_epsilon=c.clip_epsilon,
            clip_value=c.clip_value,
            normalize_advantage=c.normalize_advantage,
            entropy_coef=c.entropy_coef,
            value_coef=c.value_coef,
            reduction=c.reduction,
        )

    def update(self, batch, progress, frames, step):
        """Logs ``epochs``: the epochs completed (fewer when ``target_kl`` stopped the batch)."""
        c = self.cfg.loss
        self.loss.clip_epsilon = c.clip_epsilon * (1 - progress if c.anneal_clip else 1)
        self.loss.entropy_coef = c.entropy_coef * (1 - progress if c.anneal_entropy else 1)
        add_gae(batch, c.gamma, c.gae_lambda)
        kl_limit = c.target_kl and 1.5 * c.target_kl
        for epoch in range(c.epochs):
            for mb in minibatches(batch, c.num_minibatches, self.sampler):
                terms = self.loss(mb)
                if kl_limit and terms["approx_kl"].item() > kl_limit:  # too far from the rollout's
                    step(terms, apply=False)  # logged, not stepped
                    return {"epochs": epoch}
                step(terms)
        return {"epochs": c.epochs}
