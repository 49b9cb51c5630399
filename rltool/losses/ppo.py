"""PPO's clipped objective, as sub-losses that can each be called alone.

Input: a rollout (or a minibatch of it) of batch [T, B] (or [N] for an MLP policy) holding
``action``, ``sample_log_prob``, ``state_value``, ``advantage``, ``value_target`` and what the
policy reads; an optional bool ``mask`` [.., 1] drops entries.
The policy is re-run in temporal mode.
``forward`` returns ``loss_actor``, ``loss_value``, ``loss_entropy`` (coefficients applied: the
loop sums them) and the diagnostics ``approx_kl``, ``clip_fraction``, ``entropy``,
``explained_variance``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rltool import keys as K
from rltool.losses.reduction import reduce
from rltool.modules.recurrent import recurrent_mode


class PPOLoss(nn.Module):
    def __init__(
        self,
        policy: nn.Module,
        *,
        clip_epsilon: float = 0.2,
        clip_value: float | None = None,
        normalize_advantage: bool = True,
        entropy_coef: float = 0.0,
        value_coef: float = 0.5,
        reduction: str = "mean",
    ):
        super().__init__()
        self.policy = policy
        self.scalars = {"clip_epsilon": float(clip_epsilon), "entropy_coef": float(entropy_coef)}
        self.clip_value = clip_value
        self.normalize_advantage = normalize_advantage
        self.value_coef, self.reduction = value_coef, reduction

    def scalars_as_tensors(self) -> None:
        """compile=true: the annealed scalars become 0-d tensors on the policy's device, set in
        place, which a compiled forward reads as inputs (a float is a constant, recompiled at
        each new value). Eager keeps floats: a float32 tensor rounds the clip bounds 1 ulp
        differently, and an eager run must give the numbers it gave before."""
        dev = next(self.policy.parameters(), torch.empty(0)).device
        self.scalars = {k: torch.tensor(v, device=dev) for k, v in self.scalars.items()}

    def _set(self, name: str, value: float) -> None:
        if isinstance(self.scalars[name], torch.Tensor):
            self.scalars[name].fill_(value)
        else:
            self.scalars[name] = float(value)

    clip_epsilon = property(
        lambda self: self.scalars["clip_epsilon"], lambda self, v: self._set("clip_epsilon", v)
    )
    entropy_coef = property(
        lambda self: self.scalars["entropy_coef"], lambda self, v: self._set("entropy_coef", v)
    )

    def evaluate(self, td: TensorDictBase) -> dict[str, torch.Tensor]:
        """The current policy on the stored actions (temporal mode unless forced sequential)."""
        with recurrent_mode("temporal"):
            return self.policy.evaluate(td)

    def _mask(self, td):
        mask = td.get(K.MASK, None)
        return mask.reshape(td.batch_size) if mask is not None else None

    def _advantage(self, td, mask):
        adv = td.get(K.ADVANTAGE).reshape(td.batch_size)
        if not self.normalize_advantage or adv.numel() < 2:
            return adv
        sel = adv[mask] if mask is not None else adv
        return (adv - sel.mean()) / (sel.std() + 1e-8)

    def _log_ratio(self, td, ev):
        return ev[K.SAMPLE_LOG_PROB] - td.get(K.SAMPLE_LOG_PROB).reshape(td.batch_size)

    def actor_loss(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        """-min(r A, clip(r, 1-eps, 1+eps) A)."""
        ev = ev if ev is not None else self.evaluate(td)
        mask = self._mask(td)
        adv, ratio = self._advantage(td, mask), self._log_ratio(td, ev).exp()
        eps = self.clip_epsilon
        surrogate = torch.min(ratio * adv, ratio.clamp(1 - eps, 1 + eps) * adv)
        return reduce(-surrogate, self.reduction, mask)

    def value_loss(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        """value_coef * 0.5 (V - target)^2, optionally clipped around the stored value."""
        ev = ev if ev is not None else self.evaluate(td)
        value = ev[K.STATE_VALUE].reshape(td.batch_size)
        target = td.get(K.VALUE_TARGET).reshape(td.batch_size)
        err = (value - target).pow(2)
        if self.clip_value is not None:
            old = td.get(K.STATE_VALUE).reshape(td.batch_size)
            clipped = old + (value - old).clamp(-self.clip_value, self.clip_value)
            err = torch.max(err, (clipped - target).pow(2))
        return reduce(0.5 * self.value_coef * err, self.reduction, self._mask(td))

    def entropy_loss(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        """-entropy_coef * entropy."""
        ev = ev if ev is not None else self.evaluate(td)
        return reduce(-self.entropy_coef * ev["entropy"], self.reduction, self._mask(td))

    def forward(self, td: TensorDictBase) -> TensorDict:
        ev = self.evaluate(td)
        out = {
            "loss_actor": self.actor_loss(td, ev),
            "loss_value": self.value_loss(td, ev),
            "loss_entropy": self.entropy_loss(td, ev),
        }
        with torch.no_grad():
            out.update(self._diagnostics(td, ev))
        return TensorDict(out, [])

    def _diagnostics(self, td, ev) -> dict[str, torch.Tensor]:
        mask = self._mask(td)
        sel = (lambda x: x[mask]) if mask is not None else (lambda x: x.reshape(-1))
        log_ratio = sel(self._log_ratio(td, ev))
        target = sel(td.get(K.VALUE_TARGET).reshape(td.batch_size))
        old_value = sel(td.get(K.STATE_VALUE).reshape(td.batch_size))
        several = target.numel() > 1
        var = target.var() if several else target.new_tensor(0.0)
        resid = (target - old_value).var() if several else var
        # where, not `if var > 0`: no data-dependent branch (compile=true traces one graph)
        unexplained = resid / var.where(var > 0, 1.0)
        return {
            "approx_kl": ((log_ratio.exp() - 1) - log_ratio).mean(),
            "clip_fraction": ((log_ratio.exp() - 1).abs() > self.clip_epsilon).float().mean(),
            "entropy": sel(ev["entropy"]).mean(),
            "explained_variance": (1 - unexplained).where(var > 0, float("nan")),
        }
