"""PPO's update: GAE over the rollout, then ``epochs`` passes of ``num_minibatches`` minibatches
(whole env columns for a recurrent policy), one gradient step each.

``loss.refresh_states``: a recurrent policy's training sequences are the rollout's env columns,
each run from the state stored at t=0 (every later state is recomputed by the loss anyway). That
state came from the previous rollout, computed by older parameters; before each epoch after the
first it is recomputed with the current ones by re-running the memory over the previous rollout
(kept from the last update) from that rollout's stored t=0 states. Only the columns that continue
the previous rollout (no reset at t=0, stored state equal to its last ``("next", state)``) are
refreshed; the first update, and the first after a resume, keep the stored states.

``loss.bptt_horizon``: sequences that start before the rollout (:mod:`rltool.data.context`);
the context is part of the checkpoint.
"""

from __future__ import annotations

import logging

import torch
from tensordict import TensorDictBase

from rltool import keys as K
from rltool.algos.base import Algorithm
from rltool.algos.ppo.config import context_length
from rltool.data import SequenceContext, minibatches, resolve_sampler
from rltool.data.context import LOSS_KEYS
from rltool.data.sizes import available_memory, check_fits, spec_bytes
from rltool.losses import PPOLoss, add_gae
from rltool.modules.memory import recurrent_mode


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
        # one epoch has no later epoch to refresh: nothing is kept
        self.refresh = bool(c.refresh_states and policy.state_specs and c.epochs > 1)
        self.previous = None  # the last rollout's memory inputs (refresh_states), from keep
        self.context = self._context(cfg, env, policy)  # loss.bptt_horizon past the rollout

    def update(self, batch, progress, frames, step):
        """Logs ``epochs``: the epochs completed (fewer when ``target_kl`` stopped the batch)."""
        c = self.cfg.loss
        self.loss.clip_epsilon = c.clip_epsilon * (1 - progress if c.anneal_clip else 1)
        self.loss.entropy_coef = c.entropy_coef * (1 - progress if c.anneal_entropy else 1)
        add_gae(batch, c.gamma, c.gae_lambda)
        kl_limit = c.target_kl and 1.5 * c.target_kl
        previous, self.previous = self.previous, self.keep(batch) if self.refresh else None
        data = batch if self.context is None else self.context.extend(batch)
        for epoch in range(c.epochs):
            if epoch and previous is not None:  # the first epoch keeps the collected states
                data = self.refreshed(batch, previous)  # (from the stored ones: the check)
            for mb in minibatches(data, c.num_minibatches, self.sampler):
                terms = self.loss(mb)
                if kl_limit and terms["approx_kl"].item() > kl_limit:  # too far from the rollout's
                    step(terms, apply=False)  # logged, not stepped
                    return {"epochs": epoch}
                step(terms)
        return {"epochs": c.epochs}

    def state_parts(self) -> tuple[dict, dict]:
        return ({"bptt_context": self.context} if self.context is not None else {}), {}

    @staticmethod
    def _context(cfg, env, policy) -> SequenceContext | None:
        """The kept steps before each rollout, or None (``loss.bptt_horizon`` within the
        rollout). Its size (steps x envs x a step's entries), with the rollout's, is checked
        against the free memory before anything is allocated."""
        n = context_length(cfg)
        if n == 0:
            return None
        states = sum(spec_bytes(s) for s in policy.state_specs.values())
        step = spec_bytes(env.specs.observation) + states + 64  # + action, values, flags
        envs, t = cfg.env.num_envs, cfg.collector.frames_per_batch // cfg.env.num_envs
        need = (n + t) * envs * step
        check_fits(
            f"loss.bptt_horizon={cfg.loss.bptt_horizon}",
            need,
            f"{n} steps of context and {t} of rollout x {envs} envs x {step} bytes",
            "memory for its sequences",
            available_memory(),
            "lower loss.bptt_horizon (or loss.bptt_episode_cap), or env.num_envs",
        )
        logging.getLogger(__name__).info(
            "PPO: sequences of up to %d steps (%d before each rollout), ~%.1f MB kept",
            n + t,
            n,
            n * envs * step / 1e6,
        )
        return SequenceContext(n, [*policy.in_keys, *policy.state_specs, *LOSS_KEYS])

    def keep(self, batch: TensorDictBase) -> tuple[TensorDictBase, dict]:
        """What the next update's refresh reads of this rollout [T, B]: the memory's inputs,
        ``is_init`` and stored states at every step, and the states after its last step
        {key: [B, ...]}. Copies: the collector reuses its buffer."""
        p = self.policy
        keys = [k for k in (*p.in_keys, K.IS_INIT, *p.state_specs) if k != p.mask_key]
        last = {k: batch.get(K.nxt(k))[-1].clone() for k in p.state_specs}
        return batch.select(*keys).clone(), last

    def refreshed(self, batch: TensorDictBase, previous) -> TensorDictBase:
        """``batch`` [T, B] (a shallow copy; the input is not changed) with the state keys at t=0
        recomputed by the current parameters over ``previous`` (from :meth:`keep`), in the
        columns that continue it; the others as stored."""
        kept, last = previous
        with torch.no_grad(), recurrent_mode("temporal"):
            fresh = self.policy.final_states(kept)
        cont = ~batch.get(K.IS_INIT)[0].reshape(-1)  # a reset at t=0 starts from zeros anyway
        for k, s in last.items():  # the stored state is where the previous rollout ended
            cont &= (batch.get(k)[0] == s).reshape(len(cont), -1).all(1)
        out = batch.clone(False)
        for k, s in fresh.items():
            states = batch.get(k).clone()
            where = cont.view(-1, *[1] * (s.dim() - 1))
            states[0] = torch.where(where, s.to(states.dtype), states[0])
            out.set(k, states)
        return out
