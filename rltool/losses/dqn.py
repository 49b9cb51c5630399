"""DQN's TD loss, as sub-losses that can each be called alone, with a target network.

Input: a window of batch [T, B] (time-major; a batch of transitions is [1, N]) holding
``action``, ``("next", "reward" | "terminated" | "done" | "observation")`` and what the policy
reads (for a recurrent policy: its state at t=0 and ``is_init``); an optional bool ``mask``
[T, B, 1] drops entries (padding, burn-in). The first ``burn_in`` steps of a window only warm the
recurrent state, without gradient (R2D2); they never enter the loss.

Targets: n-step returns cut at the first ``done`` and at the end of the window; a terminated step
bootstraps with 0, a truncated one from Q of the true final observation, with the state after the
step. With ``action_mask`` in the window (``env.action_mask``), the max (and double DQN's argmax)
runs over the valid actions of ``("next", "action_mask")``, the next observation's mask. The
target network's parameters live in a TensorDict (``target_params``) that is swapped
into the policy for the target pass, so there is no second copy of the module.
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from torch import nn

from rltool import keys as K
from rltool.losses.reduction import reduce
from rltool.losses.target import TargetParams, warm
from rltool.modules.heads import masked_max
from rltool.modules.recurrent import recurrent_mode


def linear_schedule(start: float, end: float, duration: int, t: int) -> float:
    """``start`` at t=0, linearly to ``end`` at t=duration, then ``end`` (the epsilon schedule)."""
    return start + (end - start) * min(1.0, max(t, 0) / duration)


def n_step_targets(reward, next_value, terminated, done, gamma: float, n: int) -> torch.Tensor:
    """All [T, B] (flags bool) -> target [T, B]: sum_k gamma^k r_{t+k} + gamma^m V'_{t+m-1}, the
    horizon m <= n stopping at the first done and at the window's end; V' is 0 if terminated."""
    T = reward.shape[0]
    target, discount = torch.zeros_like(reward), torch.ones_like(reward)
    boot, running = torch.zeros_like(reward), torch.ones_like(done)
    last = torch.arange(T, device=reward.device).view(T, *[1] * (reward.dim() - 1)) == T - 1

    def ahead(x, k, fill):  # x[t + k], ``fill`` beyond the window
        return torch.cat([x[k:], torch.full_like(x[:k], fill)]) if k else x

    for k in range(n):
        active = running & (torch.arange(T, device=reward.device).view_as(last) + k < T)
        target = target + torch.where(active, discount * ahead(reward, k, 0), 0.0)
        discount = torch.where(active, discount * gamma, discount)
        stop = active & (ahead(done, k, True) | ahead(last, k, True) | (k == n - 1))
        value = torch.where(ahead(terminated, k, True), 0.0, ahead(next_value, k, 0))
        boot = torch.where(stop, value, boot)
        running = running & ~stop
    return target + discount * boot


class DQNLoss(nn.Module):
    def __init__(
        self,
        policy: nn.Module,
        *,
        gamma: float = 0.99,
        n_steps: int = 1,
        double_dqn: bool = False,
        loss_function: str = "l2",
        reduction: str = "mean",
        target_update: str = "hard",
        target_update_every: int = 1,
        tau: float = 0.005,
        burn_in: int = 0,
    ):
        super().__init__()
        if loss_function not in ("l2", "smooth_l1"):
            raise ValueError(f"unknown loss_function {loss_function!r}: l2 or smooth_l1")
        self.policy, self.gamma, self.n_steps, self.double_dqn = policy, gamma, n_steps, double_dqn
        self.loss_function, self.reduction, self.burn_in = loss_function, reduction, burn_in
        self.target_update, self.tau = target_update, tau
        self.target_update_every = target_update_every
        self.target = TargetParams(policy)

    @property
    def target_params(self) -> TensorDict:
        return self.target.params

    @property
    def updates(self) -> int:
        return self.target.updates

    @updates.setter
    def updates(self, n: int) -> None:
        self.target.updates = n

    # ---- Q-values ----
    def _swap(self, params):
        return params.to_module(self.policy) if params is not None else contextlib.nullcontext()

    def _warm(self, td: TensorDictBase) -> TensorDictBase:
        """td[burn_in:] with the state at step burn_in from a no-grad pass over td[:burn_in]."""
        if not self.policy.state_specs:
            return td[self.burn_in :]
        return warm(td, self.burn_in, lambda h: self.policy.action_values(h, need_states=True)[2])

    def _q(self, td, params=None, with_next=True):
        """(Q [T', B, n], Q of the next observations [T', B, n]) on the steps after burn-in, with
        ``params`` swapped in (the target network) or the online parameters."""
        with self._swap(params), recurrent_mode("temporal"):
            q, q_next, _ = self.policy.action_values(self._warm(td), with_next=with_next)
        return q, q_next

    def evaluate(self, td: TensorDictBase) -> dict[str, torch.Tensor]:
        """``chosen_action_value`` (with grad) and ``value_target`` (no grad), each [T', B]."""
        b = self.burn_in
        q, q_next_online = self._q(td, with_next=self.double_dqn)
        action = td.get(K.ACTION)[b:].long()
        chosen = q.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            _, q_next = self._q(td, self.target_params)
            nxt = td.get(K.NEXT)[b:]
            mask = nxt.get(K.ACTION_MASK, None)
            if mask is not None:
                next_value = self._masked_next_value(q_next, q_next_online, mask)
            elif self.double_dqn:
                best = q_next_online.argmax(-1, keepdim=True)
                next_value = q_next.gather(-1, best).squeeze(-1)
            else:
                next_value = q_next.max(-1).values
            flat = lambda key: nxt.get(key).reshape(next_value.shape)  # noqa: E731
            target = n_step_targets(
                flat(K.REWARD).to(next_value.dtype),
                next_value,
                flat(K.TERMINATED),
                flat(K.DONE),
                self.gamma,
                self.n_steps,
            )
        return {K.CHOSEN_ACTION_VALUE: chosen, K.VALUE_TARGET: target}

    def _masked_next_value(self, q_next, q_next_online, mask) -> torch.Tensor:
        """max over the valid next actions [T', B] (double DQN: the target's Q at the online
        network's valid argmax); 0 where the next mask allows nothing (a terminal state)."""
        if not self.double_dqn:
            return masked_max(q_next, mask)
        best = q_next_online.masked_fill(~mask, -torch.inf).argmax(-1, keepdim=True)
        value = q_next.gather(-1, best).squeeze(-1)
        return torch.where(mask.any(-1), value, 0.0)

    def _mask(self, td) -> torch.Tensor | None:
        mask = td.get(K.MASK, None)
        return mask.reshape(td.batch_size) if mask is not None else None

    def _pad(self, x: torch.Tensor) -> torch.Tensor:
        """[T', B] -> [T, B] with zeros on the burn-in steps."""
        return torch.cat([x.new_zeros(self.burn_in, *x.shape[1:]), x]) if self.burn_in else x

    # ---- sub-losses ----
    def td_error(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        """target - Q(s, a), [T, B], no grad, zero where the mask is off or on burn-in steps."""
        ev = ev if ev is not None else self.evaluate(td)
        err = self._pad((ev[K.VALUE_TARGET] - ev[K.CHOSEN_ACTION_VALUE]).detach())
        return reduce(err, "none", self._mask(td))

    def value_loss(self, td: TensorDictBase, ev: dict | None = None) -> torch.Tensor:
        """l2: (Q - target)^2; smooth_l1: Huber (delta 1); times ``priority_weight`` if present;
        reduced over masked-in steps after burn-in ("none": [T, B] with zeros elsewhere)."""
        ev = ev if ev is not None else self.evaluate(td)
        fn = F.mse_loss if self.loss_function == "l2" else F.smooth_l1_loss
        err = fn(ev[K.CHOSEN_ACTION_VALUE], ev[K.VALUE_TARGET], reduction="none")
        weight = td.get(K.PRIORITY_WEIGHT, None)  # prioritized replay's importance weights
        if weight is not None:
            err = err * weight[self.burn_in :].reshape(err.shape)
        return reduce(self._pad(err), self.reduction, self._in_loss(td))

    def _in_loss(self, td) -> torch.Tensor | None:
        """The mask of the steps that count: the given mask, without the burn-in steps."""
        mask = self._mask(td)
        if not self.burn_in:
            return mask
        steps = torch.arange(td.shape[0], device=td.device).view(-1, *[1] * (td.batch_dims - 1))
        keep = (steps >= self.burn_in).expand(td.batch_size)
        return keep if mask is None else keep & mask

    def forward(self, td: TensorDictBase) -> TensorDict:
        """``loss_value`` and diagnostics: ``q_mean``, ``target_mean``, ``td_error_abs_mean`` /
        ``_max`` (over the steps in the loss) and ``td_error`` [T, B] (for priorities)."""
        ev = self.evaluate(td)
        out = {"loss_value": self.value_loss(td, ev)}
        with torch.no_grad():
            err = self.td_error(td, ev)
            mask = self._in_loss(td)
            sel = (lambda x: x[mask]) if mask is not None else (lambda x: x.reshape(-1))
            out["q_mean"] = sel(self._pad(ev[K.CHOSEN_ACTION_VALUE].detach())).mean()
            out["target_mean"] = sel(self._pad(ev[K.VALUE_TARGET])).mean()
            out["td_error_abs_mean"] = sel(err).abs().mean()
            out["td_error_abs_max"] = sel(err).abs().max()
            out["td_error"] = err
        return TensorDict(out, [])

    # ---- target network ----
    def update_target(self) -> None:
        """Call after each optimiser step: hard copies every ``target_update_every`` updates;
        soft moves the target by ``tau`` towards the online parameters every update."""
        self.target.update(self.target_update, self.tau, self.target_update_every)
