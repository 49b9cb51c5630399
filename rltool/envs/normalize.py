"""Running statistics for observation normalisation and reward scaling.

Both compute in float64 numpy on the host, where the env's arrays are (a handful of numpy ops on
[B] rows cost a fraction of the same torch ops' dispatch), take and return CPU tensors, and hand
their state out as float64 tensors (``state_dict`` / ``load_state_dict``), so it travels in a
checkpoint and loads with ``weights_only=True``. They update only while ``training`` is True (the
owning env's flag); an eval env shares the train env's ``ObsNormalizer`` and never updates it.
"""

from __future__ import annotations

import numpy as np
import torch


class RunningMeanStd:
    """Mean and variance over every sample seen (Chan et al.'s parallel update); numpy float64."""

    def __init__(self, shape: tuple[int, ...]):
        self.mean = np.zeros(shape)
        self.var = np.ones(shape)
        self.count = 1e-4

    def update(self, x: np.ndarray) -> None:
        """x: [N, *shape]."""
        x = np.asarray(x, dtype=np.float64)
        b_count = x.shape[0]
        b_mean = x.sum(0) / b_count  # sum and divide: np.mean's and np.var's overhead is ~5x
        b_var = np.square(x - b_mean).sum(0) / b_count
        delta, total = b_mean - self.mean, self.count + b_count
        self.mean = self.mean + delta * (b_count / total)
        m2 = self.var * self.count + b_var * b_count + delta**2 * (self.count * b_count / total)
        self.var = m2 / total
        self.count = total

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {
            "mean": torch.from_numpy(np.array(self.mean)),  # a copy; 0-d for a scalar's stats
            "var": torch.from_numpy(np.array(self.var)),
            "count": torch.tensor(self.count, dtype=torch.float64),
        }

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.mean, self.var = (state[k].double().numpy().copy() for k in ("mean", "var"))
        self.count = float(state["count"])


class ObsNormalizer:
    """(obs - mean) / std, clipped to [-clip, clip]. The statistics stop learning once they have
    seen ``max_count`` observations (None: never): the count is part of the state, so a resumed
    run freezes at the same frame."""

    def __init__(
        self,
        shape: tuple[int, ...],
        clip: float = 10.0,
        eps: float = 1e-8,
        max_count: int | None = None,
    ):
        self.stats, self.clip, self.eps = RunningMeanStd(shape), clip, eps
        self.max_count = max_count

    def __call__(self, obs: torch.Tensor, update: bool = True) -> torch.Tensor:
        """obs: a CPU tensor [N, *shape]; returns one of the same dtype."""
        x = obs.numpy()
        if update and (self.max_count is None or self.stats.count < self.max_count):
            self.stats.update(x)
        out = (x - self.stats.mean) / np.sqrt(self.stats.var + self.eps)
        return torch.from_numpy(np.clip(out, -self.clip, self.clip).astype(x.dtype, copy=False))

    def state_dict(self):
        return self.stats.state_dict()

    def load_state_dict(self, state):
        self.stats.load_state_dict(state)


class EntryNormalizer:
    """An :class:`ObsNormalizer` per float vector entry of a nested observation (a TensorDict);
    images, indices and one-hot entries pass unchanged. State: ``{entry: {mean, var, count}}``."""

    def __init__(self, spec, clip: float = 10.0, max_count: int | None = None):
        self.norms = {
            k: ObsNormalizer(s.shape, clip, max_count=max_count)
            for k, s in spec.entries.items()
            if s.kind == "vector"
        }

    def __call__(self, obs, update: bool = True):
        if not self.norms:
            return obs
        out = obs.clone(recurse=False)
        for k, norm in self.norms.items():
            out.set(k, norm(obs.get(k), update))
        return out

    def state_dict(self):
        return {k: n.state_dict() for k, n in self.norms.items()}

    def load_state_dict(self, state):
        for k, n in self.norms.items():
            n.load_state_dict(state[k])


def make_obs_normalizer(spec, clip: float = 10.0, max_count: int | None = None):
    """The running normaliser of an observation spec: one :class:`ObsNormalizer` for a flat
    observation, an :class:`EntryNormalizer` for a nested one, None for an image (uint8 pixels or
    codes are no running statistics' business)."""
    if hasattr(spec, "entries"):
        return EntryNormalizer(spec, clip, max_count)
    if spec.kind == "image":
        return None
    return ObsNormalizer(spec.shape, clip=clip, max_count=max_count)


class RewardScaler:
    """Divides rewards by the std of the discounted return (as SB3's VecNormalize does)."""

    def __init__(self, num_envs: int, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        self.stats, self.gamma, self.clip, self.eps = RunningMeanStd(()), gamma, clip, eps
        self.ret = np.zeros(num_envs)  # the running discounted return of each env's episode

    def __call__(
        self, reward: torch.Tensor, done: torch.Tensor, update: bool = True
    ) -> torch.Tensor:
        """reward: [B] raw; done: [B] bool (CPU tensors). Returns the scaled reward, [B]."""
        r = reward.numpy().astype(np.float64)
        if update:
            self.ret = self.ret * self.gamma + r
            self.stats.update(self.ret)
            self.ret[done.numpy()] = 0.0
        scaled = np.clip(r / np.sqrt(self.stats.var + self.eps), -self.clip, self.clip)
        return torch.from_numpy(scaled.astype(np.float32)).to(reward.dtype)

    def reset_returns(self) -> None:
        """Forget the running returns (their episodes are over)."""
        self.ret[:] = 0.0

    def returns(self) -> torch.Tensor:
        """The running returns, [B] float64 (part of the env's state)."""
        return torch.from_numpy(self.ret.copy())

    def set_returns(self, ret: torch.Tensor) -> None:
        self.ret = ret.double().numpy().reshape(self.ret.shape).copy()

    def state_dict(self):
        return {**self.stats.state_dict(), "ret": self.returns()}

    def load_state_dict(self, state):
        self.stats.load_state_dict(state)
        self.set_returns(state["ret"])
