"""SAC's loss (Haarnoja et al. 2018, automatic entropy tuning), as sub-losses that can each be
called alone, on replay windows: recurrent SAC as Ni et al. 2022 (pomdp-baselines) trains it.

Input: a window of batch [T, B] from the replay (``rltool/data/buffer.py``) holding ``action``,
``("next", "reward" | "terminated" | "done" | "observation")``, what the policy reads (its
inputs; for a recurrent policy the actor's and the critics' states at t=0 and ``is_init``) and
an optional bool ``mask`` [T, B, 1]. The first ``burn_in`` steps only warm the online and the
target memories (no gradient, :func:`rltool.losses.target.warm`) and never enter the loss.

The policy (``heads=("actor", "qvalue")``) holds a squashed Gaussian actor on its own torso,
twin Q(s, a) heads on the critics' torso and ``log_alpha``. With one optimiser over all of them,
each parameter gets the gradient of one term only: the actor's loss reads Q through detached
critic features and parameters, the critics' target is computed without gradient, and alpha's
loss sees detached log-probs.

- ``loss_qvalue``: (Q1 - y)^2 + (Q2 - y)^2 (pomdp-baselines' sum of the two), with
  y = r + gamma * (min target Q(s', a') - alpha log pi(a'|s')), a' ~ pi(s'), 0 after a terminated
  step; a truncated one bootstraps from its true final observation with the state it followed.
- ``loss_actor``: alpha log pi(a|s) - min Q(s, a), a ~ pi(s) reparameterised.
- ``loss_alpha``: -log_alpha * (log pi(a|s) + target_entropy).
Each is reduced over the masked-in steps after burn-in (``reduction``; "none": [T - burn_in, B]).
"""

from __future__ import annotations

import math

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rltool import keys as K
from rltool.losses.reduction import reduce
from rltool.losses.target import TargetParams, warm
from rltool.modules.recurrent import recurrent_mode


class SACLoss(nn.Module):
    """Args:
    policy: an ``ActorCritic`` built with ``heads=("actor", "qvalue")``.
    gamma: the discount.
    tau: the target critics move by ``tau`` towards the online ones per update (Polyak).
    alpha_init: the entropy coefficient's initial value (sets ``policy.log_alpha``).
    target_entropy: None: -|A| (minus the action's size).
    reduction: mean | sum | none, of each sub-loss.
    burn_in: the window's first steps that only warm the memories."""

    def __init__(
        self,
        policy: nn.Module,
        *,
        gamma: float = 0.99,
        tau: float = 0.005,
        alpha_init: float = 1.0,
        target_entropy: float | None = None,
        reduction: str = "mean",
        burn_in: int = 0,
    ):
        super().__init__()
        self.policy, self.gamma, self.tau = policy, gamma, tau
        self.reduction, self.burn_in = reduction, burn_in
        if target_entropy is None:
            target_entropy = -float(policy.action_features)
        self.target_entropy = target_entropy
        with torch.no_grad():
            policy.log_alpha.fill_(math.log(alpha_init))
        self.critic = nn.ModuleList([policy.critic_torso, policy.qvalue])
        self.target = TargetParams(self.critic)

    # ---- passes ----
    def _states(self, torsos):
        def states(head: TensorDictBase) -> dict:
            runs = self.policy.sequence_features(head, torsos, need_states=True)
            return {k: v for _, s in runs for k, v in s.items()}

        return states

    def _pass(self, td, torsos, next_torsos):
        """``torsos``' features [T', B, F] after burn-in, and ``next_torsos``' of the next
        observations (from the states after each step)."""
        rest = warm(td, self.burn_in, self._states(torsos))
        runs = self.policy.sequence_features(rest, torsos, need_states=bool(next_torsos))
        states = {k: v for _, s in runs for k, v in s.items()}
        nxt = self.policy.next_features(rest, next_torsos, states) if next_torsos else []
        return [f for f, _ in runs], nxt, rest

    def evaluate(self, td: TensorDictBase) -> dict[str, torch.Tensor]:
        """Everything the sub-losses read, each [T', B] (T' = T - burn_in): ``q1``, ``q2`` of the
        stored actions, ``value_target`` (no grad), ``log_prob`` and ``q_new`` (min Q through
        detached critics) of fresh actions."""
        p = self.policy
        actor, critic = p.actor_torso, p.critic_torso
        with recurrent_mode("temporal"):
            (feat, cfeat), (feat_next,), rest = self._pass(td, [actor, critic], [actor])
            q1, q2 = p.qvalue(cfeat, rest.get(K.ACTION))
            action, log_prob = p.dist.rsample(p.dist(feat))
            with TensorDict.from_module(p.qvalue).detach().to_module(p.qvalue):
                q_new = torch.minimum(*p.qvalue(cfeat.detach(), action))
            with torch.no_grad():
                target = self._target(td, rest, feat_next)
        return {"q1": q1, "q2": q2, K.VALUE_TARGET: target, "log_prob": log_prob, "q_new": q_new}

    def _target(self, td, rest, feat_next) -> torch.Tensor:
        """y [T', B] (no grad): the target critics' memory warmed on its own."""
        p = self.policy
        next_action, next_log_prob = p.dist.rsample(p.dist(feat_next))
        with self.target.swap():
            _, (tfeat_next,), _ = self._pass(td, [p.critic_torso], [p.critic_torso])
            q_next = torch.minimum(*p.qvalue(tfeat_next, next_action))
        value = q_next - self.alpha * next_log_prob
        nxt = rest.get(K.NEXT)
        flat = lambda key: nxt.get(key).reshape(value.shape)  # noqa: E731
        value = torch.where(flat(K.TERMINATED), 0.0, value)
        return flat(K.REWARD).to(value.dtype) + self.gamma * value

    @property
    def alpha(self) -> torch.Tensor:
        return self.policy.log_alpha.detach().exp()

    def _in_loss(self, td) -> torch.Tensor | None:
        mask = td.get(K.MASK, None)
        return (
            mask[self.burn_in :].reshape(mask.shape[0] - self.burn_in, -1)
            if mask is not None
            else None
        )

    # ---- sub-losses ----
    def loss_qvalue(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        ev = ev if ev is not None else self.evaluate(td)
        y = ev[K.VALUE_TARGET]
        err = (ev["q1"] - y).pow(2) + (ev["q2"] - y).pow(2)
        return reduce(err, self.reduction, self._in_loss(td))

    def loss_actor(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        ev = ev if ev is not None else self.evaluate(td)
        return reduce(self.alpha * ev["log_prob"] - ev["q_new"], self.reduction, self._in_loss(td))

    def loss_alpha(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        """Its gradient in log_alpha is -(log pi + target_entropy): alpha rises while the
        policy's entropy (-log pi) is below the target."""
        ev = ev if ev is not None else self.evaluate(td)
        excess = ev["log_prob"].detach() + self.target_entropy
        return reduce(-self.policy.log_alpha * excess, self.reduction, self._in_loss(td))

    def forward(self, td: TensorDictBase) -> TensorDict:
        """The three ``loss_*`` terms and ``alpha``, ``entropy`` (-log pi), ``q_mean`` and
        ``target_mean`` (over the steps in the loss)."""
        ev = self.evaluate(td)
        out = {
            "loss_qvalue": self.loss_qvalue(td, ev),
            "loss_actor": self.loss_actor(td, ev),
            "loss_alpha": self.loss_alpha(td, ev),
        }
        with torch.no_grad():
            mask = self._in_loss(td)
            sel = (lambda x: x[mask]) if mask is not None else (lambda x: x.reshape(-1))
            out["alpha"] = self.alpha
            out["entropy"] = -sel(ev["log_prob"]).mean()
            out["q_mean"] = sel(ev["q1"]).mean()
            out["target_mean"] = sel(ev[K.VALUE_TARGET]).mean()
        return TensorDict(out, [])

    def update_target(self) -> None:
        """Call after each optimiser step: the target critics move by ``tau``."""
        self.target.update("soft", self.tau)
