"""Action distributions and value heads, as plain tensor functions (no torch.distributions:
its argument checks cost more than the maths on small batches)."""

from __future__ import annotations

import math

import torch
from torch import nn

from rltool import keys as K
from rltool.errors import ConfigError
from rltool.modules.mlp import init_linear, mlp


def mask_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``logits`` [*, n] with the invalid actions (``mask`` [*, n] bool False) at the dtype's
    lowest finite value: their probability is 0 and softmax / entropy stay free of NaN (-inf
    would give 0 * -inf)."""
    return logits.masked_fill(~mask, torch.finfo(logits.dtype).min)


class CategoricalHead(nn.Module):
    """features [*, F] -> ``logits`` [*, n]; actions are int64 [*]."""

    param_keys = (K.LOGITS,)

    def __init__(self, in_features: int, n: int):
        super().__init__()
        self.linear = init_linear(nn.Linear(in_features, n), gain=0.01)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {K.LOGITS: self.linear(x)}

    @staticmethod
    def sample(params, explore: bool, masked: bool = False) -> torch.Tensor:
        """``masked``: the logits were masked (:func:`mask_logits`)."""
        logits = params[K.LOGITS]
        if not explore:
            return logits.argmax(-1)
        # Gumbel-max: argmax(logits + Gumbel noise) ~ softmax(logits), in ~1/3 of softmax +
        # multinomial's time on a [B, n] batch. The noise is -log(-log u), u in [0, 1): u = 0
        # gives -inf (never picked), so no category is ever picked by a rounding accident.
        u = torch.rand_like(logits)
        if masked:  # u = 0 on a valid action would lose to a masked one's finite lowest value
            u.clamp_min_(torch.finfo(u.dtype).tiny)
        gumbel = u.log_().neg_().log_().neg_()
        return (logits + gumbel).argmax(-1)

    @staticmethod
    def log_prob(params, action: torch.Tensor) -> torch.Tensor:
        logp = torch.log_softmax(params[K.LOGITS], -1)
        return logp.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def entropy(params) -> torch.Tensor:
        logp = torch.log_softmax(params[K.LOGITS], -1)
        return -(logp.exp() * logp).sum(-1)


class MultiCategoricalHead(nn.Module):
    """MultiDiscrete actions: one categorical per factor (``nvec``), ``logits`` [*, sum(nvec)];
    actions int64 [*, k]; log-probs and entropies summed over the factors; greedy = per-factor
    argmax."""

    param_keys = (K.LOGITS,)

    def __init__(self, in_features: int, nvec: tuple[int, ...]):
        super().__init__()
        self.nvec = [int(n) for n in nvec]
        self.linear = init_linear(nn.Linear(in_features, sum(self.nvec)), gain=0.01)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {K.LOGITS: self.linear(x)}

    def _split(self, params):
        return params[K.LOGITS].split(self.nvec, -1)

    def sample(self, params, explore: bool, masked: bool = False) -> torch.Tensor:
        return torch.stack(
            [CategoricalHead.sample({K.LOGITS: lg}, explore, masked) for lg in self._split(params)],
            -1,
        )

    def log_prob(self, params, action: torch.Tensor) -> torch.Tensor:
        parts = self._split(params)
        return sum(
            CategoricalHead.log_prob({K.LOGITS: lg}, action[..., i]) for i, lg in enumerate(parts)
        )

    def entropy(self, params) -> torch.Tensor:
        return sum(CategoricalHead.entropy({K.LOGITS: lg}) for lg in self._split(params))


class GaussianHead(nn.Module):
    """features [*, F] -> ``loc``, ``scale`` [*, d]: a diagonal Gaussian with a state-independent
    log-std (as SB3). No squashing: the sample is stored and scored unbounded; the env clips it to
    the action bounds, so ``sample_log_prob`` is the log-prob of the stored, unclipped action."""

    param_keys = (K.LOC, K.SCALE)

    def __init__(self, in_features: int, dim: int, init_log_std: float = 0.0):
        super().__init__()
        self.linear = init_linear(nn.Linear(in_features, dim), gain=0.01)
        self.log_std = nn.Parameter(torch.full((dim,), float(init_log_std)))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        loc = self.linear(x)
        return {K.LOC: loc, K.SCALE: self.log_std.exp().expand_as(loc)}

    @staticmethod
    def sample(params, explore: bool, masked: bool = False) -> torch.Tensor:
        loc = params[K.LOC]
        return loc + params[K.SCALE] * torch.randn_like(loc) if explore else loc

    @staticmethod
    def log_prob(params, action: torch.Tensor) -> torch.Tensor:
        loc, scale = params[K.LOC], params[K.SCALE]
        z = (action - loc) / scale
        return (-0.5 * z.pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)).sum(-1)

    @staticmethod
    def entropy(params) -> torch.Tensor:
        return (0.5 + 0.5 * math.log(2 * math.pi) + params[K.SCALE].log()).sum(-1)


def value_head(in_features: int, out: int = 1) -> nn.Linear:
    return init_linear(nn.Linear(in_features, out), gain=1.0)


class QHead(nn.Module):
    """features [*, F] -> ``action_value`` [*, n] (Q-values of a discrete action space).

    ``dueling`` (Wang et al. 2016): Q = V + A - mean(A), a state value and per-action advantages
    from two linear layers. Where all actions are worth nearly the same (a balanced pole: Q ~ 50,
    the gap between pushes ~0.1) the advantages are learned at their own scale, not as the small
    difference of two large outputs."""

    param_keys = (K.ACTION_VALUE,)

    def __init__(self, in_features: int, n: int, dueling: bool = False):
        super().__init__()
        self.linear = init_linear(nn.Linear(in_features, n), gain=1.0)  # the advantages if dueling
        self.value = init_linear(nn.Linear(in_features, 1), gain=1.0) if dueling else None

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        q = self.linear(x)
        if self.value is not None:
            q = self.value(x) + q - q.mean(-1, keepdim=True)
        return {K.ACTION_VALUE: q}


def epsilon_greedy(q: torch.Tensor, epsilon: float, mask: torch.Tensor | None = None):
    """q [*, n] -> int64 actions [*]: argmax, replaced by a uniform action with prob ``epsilon``;
    with ``mask`` [*, n] bool both over the valid actions only."""
    if mask is not None:
        return _masked_epsilon_greedy(q, epsilon, mask)
    greedy = q.argmax(-1)
    if epsilon <= 0:
        return greedy
    explore = torch.rand(greedy.shape, device=q.device) < epsilon
    random = torch.randint(q.shape[-1], greedy.shape, device=q.device)
    return torch.where(explore, random, greedy)


def _masked_epsilon_greedy(q: torch.Tensor, epsilon: float, mask: torch.Tensor) -> torch.Tensor:
    greedy = q.masked_fill(~mask, -torch.inf).argmax(-1)
    if epsilon <= 0:
        return greedy
    explore = torch.rand(greedy.shape, device=q.device) < epsilon
    # a uniform valid action: the argmax of uniform scores in [0, 1), -1 where invalid
    random = torch.rand(q.shape, device=q.device).masked_fill_(~mask, -1.0).argmax(-1)
    return torch.where(explore, random, greedy)


def masked_max(q: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """max of q [*, n] over the valid actions -> [*]; 0 where none is valid (a terminal state's
    mask may allow nothing: its value is never bootstrapped from)."""
    best = q.masked_fill(~mask, -torch.inf).max(-1).values
    return torch.where(mask.any(-1), best, 0.0)


LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0  # SAC's clamp of a state-dependent log-std (pomdp-baselines)


class SquashedGaussianHead(nn.Module):
    """SAC's actor: features [*, F] -> ``loc``, ``scale`` [*, d] of a Gaussian over u, and the
    action ``low + (tanh(u) + 1) / 2 * (high - low)``, inside any ``Box`` bounds. The greedy
    action (evaluation, export) is the scaled tanh of ``loc``. Log-probs carry the change of
    variables: log N(u) - sum log(d action / d u)."""

    param_keys = (K.LOC, K.SCALE)

    def __init__(self, in_features: int, dim: int, low, high):
        super().__init__()
        self.linear = init_linear(nn.Linear(in_features, 2 * dim), gain=0.01)
        low, high = (torch.as_tensor(b, dtype=torch.float32).reshape(dim) for b in (low, high))
        self.register_buffer("center", (high + low) / 2)
        self.register_buffer("radius", (high - low) / 2)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        loc, log_std = self.linear(x).chunk(2, -1)
        return {K.LOC: loc, K.SCALE: log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()}

    def squash(self, u: torch.Tensor) -> torch.Tensor:
        return self.center + self.radius * torch.tanh(u)

    def rsample(self, params) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised draw: (action [*, d], its log-prob [*]), differentiable in both."""
        loc, scale = params[K.LOC], params[K.SCALE]
        u = loc + scale * torch.randn_like(loc)
        return self.squash(u), self._log_prob_u(params, u)

    def _log_prob_u(self, params, u: torch.Tensor) -> torch.Tensor:
        gauss = GaussianHead.log_prob(params, u)
        # log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)): finite where tanh(u) rounds to 1
        log_dtanh = 2 * (math.log(2) - u - nn.functional.softplus(-2 * u))
        return gauss - (log_dtanh + self.radius.log()).sum(-1)

    def sample(self, params, explore: bool, masked: bool = False) -> torch.Tensor:
        if not explore:
            return self.squash(params[K.LOC])
        return self.rsample(params)[0]

    def log_prob(self, params, action: torch.Tensor) -> torch.Tensor:
        """The log-prob of a stored ``action`` [*, d] (u recovered by atanh, clamped just
        inside the bounds)."""
        y = ((action - self.center) / self.radius).clamp(-1 + 1e-6, 1 - 1e-6)
        return self._log_prob_u(params, torch.atanh(y))

    @staticmethod
    def entropy(params) -> torch.Tensor:
        """The entropy of the Gaussian before the squash (the squashed one has no closed form)."""
        return GaussianHead.entropy(params)


class TwinQHead(nn.Module):
    """SAC's twin critics: (features [*, F], action [*, d]) -> (Q1, Q2), each [*]: two MLPs over
    the features and the action concatenated (pomdp-baselines' ``qf1`` / ``qf2`` over one
    memory's output)."""

    def __init__(self, in_features: int, action_dim: int, sizes: list[int], activation: str):
        super().__init__()
        n = in_features + action_dim
        width = sizes[-1] if sizes else n
        self.q = nn.ModuleList(
            nn.Sequential(mlp(n, sizes, activation), value_head(width)) for _ in range(2)
        )

    def forward(self, features: torch.Tensor, action: torch.Tensor):
        x = torch.cat([features, action.to(features.dtype)], -1)
        q1, q2 = (q(x).squeeze(-1) for q in self.q)
        return q1, q2


def check_squashable(act) -> None:
    """SAC's actor squashes into the action's bounds: a ``Box`` with finite ones."""
    if act.discrete or act.multi_discrete:
        raise ConfigError(
            "loss=sac needs continuous (Box) actions, but this env's are discrete: "
            "use loss=dqn or loss=ppo"
        )
    bounds = torch.tensor([*act.low, *act.high], dtype=torch.float64)
    if not bool(torch.isfinite(bounds).all()):
        raise ConfigError(
            "loss=sac squashes actions into the Box bounds, but this env's are infinite: "
            "use loss=ppo, or an env with finite action bounds"
        )
