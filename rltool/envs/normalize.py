"""Running statistics for observation normalisation and reward scaling.

Both hold their state as float64 tensors (``state_dict`` / ``load_state_dict``), so they travel in a
checkpoint and load with ``weights_only=True``. They update only while ``training`` is True (the
owning env's flag); an eval env shares the train env's ``ObsNormalizer`` and never updates it.
"""

from __future__ import annotations

import torch


class RunningMeanStd:
    """Mean and variance over every sample seen (Chan et al.'s parallel update)."""

    def __init__(self, shape: tuple[int, ...]):
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.var = torch.ones(shape, dtype=torch.float64)
        self.count = torch.tensor(1e-4, dtype=torch.float64)

    def update(self, x: torch.Tensor) -> None:
        """x: [N, *shape]."""
        x = x.to(torch.float64)
        b_mean, b_var, b_count = x.mean(0), x.var(0, unbiased=False), x.shape[0]
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean += delta * b_count / total
        m2 = self.var * self.count + b_var * b_count + delta.pow(2) * self.count * b_count / total
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.mean, self.var, self.count = (
            state[k].clone().double() for k in ("mean", "var", "count")
        )


class ObsNormalizer:
    """(obs - mean) / std, clipped to [-clip, clip]."""

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        self.stats, self.clip, self.eps = RunningMeanStd(shape), clip, eps

    def __call__(self, obs: torch.Tensor, update: bool = True) -> torch.Tensor:
        if update:
            self.stats.update(obs)
        std = (self.stats.var + self.eps).sqrt()
        out = ((obs - self.stats.mean) / std).clamp(-self.clip, self.clip)
        return out.to(obs.dtype)

    def state_dict(self):
        return self.stats.state_dict()

    def load_state_dict(self, state):
        self.stats.load_state_dict(state)


class RewardScaler:
    """Divides rewards by the std of the discounted return (as SB3's VecNormalize does)."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.stats, self.gamma, self.clip, self.eps = RunningMeanStd(()), gamma, clip, eps
        self.ret = torch.zeros(num_envs, dtype=torch.float64)

    def __call__(
        self, reward: torch.Tensor, done: torch.Tensor, update: bool = True
    ) -> torch.Tensor:
        """reward: [B] raw; done: [B] bool. Returns the scaled reward, [B]."""
        if update:
            self.ret = self.ret * self.gamma + reward.double()
            self.stats.update(self.ret)
            self.ret[done] = 0.0
        scaled = reward.double() / (self.stats.var + self.eps).sqrt()
        return scaled.clamp(-self.clip, self.clip).to(reward.dtype)

    def state_dict(self):
        return {**self.stats.state_dict(), "ret": self.ret.clone()}

    def load_state_dict(self, state):
        self.stats.load_state_dict(state)
        self.ret = state["ret"].clone().double()
