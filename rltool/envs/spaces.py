"""Gymnasium observation spaces -> specs and numpy -> tensor converters.

A flat space (Box, Discrete, 1-D MultiDiscrete) is one tensor, as always: floats, Discrete one-hot.
A Dict or Tuple space stays nested: a TensorDict of entries named by their keys (Tuple entries by
their index; a nested entry ``outer.inner``). Entries: float Box -> ``vector``; uint8 Box of 2 or
3 dims -> ``image`` (kept uint8, layout read from the space); Discrete -> ``index`` (int64);
MultiDiscrete / MultiBinary -> ``binary`` (one-hot floats). Text entries are left out with a note.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rltool.errors import ConfigError, UserError, note
from rltool.specs import IMAGE, INDEX, CompositeSpec, Spec

BINARY = "binary"


def is_text(space: gym.Space) -> bool:
    # minigrid's MissionSpace is a string space that is not a gymnasium Text
    return isinstance(space, gym.spaces.Text) or type(space).__name__ == "MissionSpace"


def image_layout(space: gym.Space) -> str | None:
    """``hwc`` / ``chw`` / ``hw`` of a uint8 Box of 2 or 3 dims (at most 4 channels), else None."""
    if not isinstance(space, gym.spaces.Box) or space.dtype != np.uint8:
        return None
    shape = space.shape
    if len(shape) == 2:
        return "hw"
    if len(shape) == 3 and shape[-1] <= 4:
        return "hwc"
    if len(shape) == 3 and shape[0] <= 4:
        return "chw"
    return None


def _one_hot(values, sizes, starts) -> torch.Tensor:
    v = np.asarray(values)
    return torch.cat(
        [
            torch.nn.functional.one_hot(
                torch.as_tensor(v[:, i] - starts[i], dtype=torch.int64), n
            ).float()
            for i, n in enumerate(sizes)
        ],
        -1,
    )


def entry_spec(space: gym.Space, name: str, symbolic: bool = False):
    """(Spec, converter) of one entry of a Dict / Tuple space."""
    layout = image_layout(space)
    if layout is not None:
        spec = Spec(tuple(space.shape), torch.uint8, kind=IMAGE, layout=layout, symbolic=symbolic)
        return spec, lambda o: torch.from_numpy(np.ascontiguousarray(o, dtype=np.uint8))
    if isinstance(space, gym.spaces.Box):
        return Spec(tuple(space.shape)), lambda o: torch.from_numpy(np.asarray(o, dtype=np.float32))
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        spec = Spec((), torch.int64, n=int(space.n), kind=INDEX)
        return spec, lambda o: torch.as_tensor(np.asarray(o) - start, dtype=torch.int64)
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        sizes, starts = [int(n) for n in space.nvec], [int(s) for s in space.start]
        return Spec((sum(sizes),), kind=BINARY), lambda o: _one_hot(o, sizes, starts)
    if isinstance(space, gym.spaces.MultiBinary) and len(space.shape) == 1:
        return Spec(tuple(space.shape), kind=BINARY), lambda o: torch.from_numpy(
            np.asarray(o, dtype=np.float32)
        )
    raise ConfigError(
        f"observation entry {name!r} is {space}, which rltool cannot encode: leave it out "
        "with env.obs_keys=[<the other entries>], or wrap the env to turn it into a Box"
    )


def space_leaves(space: gym.Space, prefix=()):
    """(path, space) of every leaf of a Dict / Tuple space; a path is a tuple of keys."""
    if isinstance(space, gym.spaces.Dict):
        items = space.spaces.items()
    elif isinstance(space, gym.spaces.Tuple):
        items = enumerate(space.spaces)
    else:
        yield prefix, space
        return
    for k, sub in items:
        yield from space_leaves(sub, (*prefix, k))


def _get(raw, path):
    for k in path:
        raw = raw[k]
    return raw


def _batch_of(raw, shape: tuple, name: str) -> int:
    """B of a batch [B, *shape], else a UserError naming the shapes that fit."""
    got = tuple(np.shape(raw))
    if len(got) != len(shape) + 1 or got[1:] != shape:
        dims = ", ".join(map(str, shape))
        raise UserError(
            f"{name} of shape {list(got)} does not fit this policy: give one raw env observation "
            f"of shape {list(shape)} or a batch of shape [B{', ' if dims else ''}{dims}]"
        )
    return got[0]


class NestedConverter:
    """Batched raw Dict / Tuple observations -> a TensorDict [B] of the chosen entries."""

    def __init__(
        self, space: gym.Space, obs_keys: list[str] | None, symbolic: bool, exclude: tuple = ()
    ):
        leaves = {".".join(str(k) for k in p): (p, s) for p, s in space_leaves(space)}
        for k in obs_keys or []:
            if k not in leaves:
                raise ConfigError(
                    f"env.obs_keys names {k!r}, which the observation space has not: choose "
                    f"among {', '.join(leaves)}"
                )
            if is_text(leaves[k][1]):
                raise ConfigError(
                    f"env.obs_keys picks {k!r}, a text entry rltool cannot encode: leave it out"
                )
        # ``exclude``: entries that are no observation feature (an action mask, env.action_mask)
        chosen = list(obs_keys) if obs_keys else [k for k in leaves if k not in exclude]
        texts = [k for k in chosen if is_text(leaves[k][1])]
        if texts:
            note(f"text observation entries {texts} are left out (rltool cannot encode text)")
        self.paths, entries, self._fns, self._shapes = {}, {}, {}, {}
        for k in chosen:
            if k in texts:
                continue
            path, sub = leaves[k]
            entries[k], self._fns[k] = entry_spec(sub, k, symbolic)
            self.paths[k], self._shapes[k] = path, tuple(sub.shape or ())
        if not entries:
            raise ConfigError("the observation has no entry rltool can encode: check env.obs_keys")
        self.spec = CompositeSpec(entries)

    def __call__(self, raw) -> TensorDict:
        out = {k: fn(_get(raw, self.paths[k])) for k, fn in self._fns.items()}
        batch = next(iter(out.values())).shape[:1]
        return TensorDict(out, batch_size=batch)

    def merge_final(self, raw, finals, mask) -> TensorDict:
        """The observations with the true final ones of the envs where ``mask``."""
        rows = np.flatnonzero(mask)
        merged = {}
        for k, path in self.paths.items():
            arr = np.array(_get(raw, path), copy=True)
            for i in rows:
                arr[i] = _get(finals[i], path)
            merged[k] = self._fns[k](arr)
        return TensorDict(merged, batch_size=[len(mask)])

    def batch_one(self, observation):
        """One observation with a batch dim of 1 (only the entries used), or None when it is
        already a batch."""
        k0 = next(iter(self.paths))
        if np.shape(_get(observation, self.paths[k0])) != self._shapes[k0]:
            return None
        out = {}
        for path in self.paths.values():
            node = out
            for p in path[:-1]:
                node = node.setdefault(p, {})
            node[path[-1]] = np.asarray(_get(observation, path))[None]
        return out

    def batch_size(self, raw) -> int:
        """B of raw observations batched [B, ...] entry by entry (a UserError if one misfits)."""
        sizes = {
            _batch_of(_get(raw, p), self._shapes[k], f"observation entry {k!r}")
            for k, p in self.paths.items()
        }
        if len(sizes) != 1:
            raise UserError(f"observation entries of different batch sizes {sorted(sizes)}")
        return sizes.pop()


class FlatConverter:
    """Batched raw observations of a flat space -> one tensor [B, *shape]."""

    def __init__(self, space: gym.Space, keep: list[int] | None, symbolic: bool = False):
        layout = image_layout(space) if keep is None else None
        if layout is not None:
            shape = tuple(space.shape)
            self.spec = Spec(shape, torch.uint8, kind=IMAGE, layout=layout, symbolic=symbolic)
            self._fn = lambda o: torch.from_numpy(np.ascontiguousarray(o, dtype=np.uint8))
        else:
            shape, self._fn = _flat(space)
            self.spec = Spec(tuple(shape))
        self._shape = tuple(space.shape or ())
        if keep is not None:
            if len(shape) != 1 or not all(0 <= i < shape[0] for i in keep) or not keep:
                raise ConfigError(
                    f"env.obs_keep={list(keep)} does not fit the observation shape "
                    f"{tuple(shape)}: give indices of a flat observation"
                )
            idx, fn = torch.tensor(list(keep)), self._fn
            self.spec, self._fn = Spec((len(keep),)), lambda o: fn(o).index_select(-1, idx)

    def __call__(self, raw) -> torch.Tensor:
        return self._fn(raw)

    def merge_final(self, raw, finals, mask) -> torch.Tensor:
        final = raw.copy()  # merged on the host: cheaper than a masked write of tensors
        final[mask] = np.stack(finals[mask])
        return self._fn(final)

    def batch_one(self, observation):
        return np.asarray(observation)[None] if np.shape(observation) == self._shape else None

    def batch_size(self, raw) -> int:
        return _batch_of(raw, self._shape, "observation")


def _flat(space: gym.Space):
    if isinstance(space, gym.spaces.Box):
        return space.shape, lambda o: torch.from_numpy(np.asarray(o, dtype=np.float32))
    if isinstance(space, gym.spaces.Discrete):
        n, start = int(space.n), space.start
        return (n,), lambda o: torch.nn.functional.one_hot(
            torch.as_tensor(np.asarray(o) - start, dtype=torch.int64), n
        ).float()
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        sizes, starts = [int(n) for n in space.nvec], list(space.start)
        return (sum(sizes),), lambda o: _one_hot(o, sizes, starts)
    raise ConfigError(
        f"unsupported observation space {space}: rltool handles Box, Discrete, 1-D "
        "MultiDiscrete, Dict and Tuple observations; wrap the env to turn it into one of them"
    )


def make_converter(
    space: gym.Space,
    keep: list[int] | None = None,
    obs_keys: list[str] | None = None,
    symbolic: bool = False,
    exclude: tuple = (),
):
    """The converter of ``space``: ``.spec``, ``(raw) -> obs``, ``merge_final``, ``batch_one``;
    ``exclude``: Dict / Tuple entries left out unless ``obs_keys`` lists them."""
    nested = isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple))
    if nested and keep is not None:
        raise ConfigError(
            "env.obs_keep selects indices of a flat observation, but this one is a Dict / "
            "Tuple: pick entries with env.obs_keys instead"
        )
    if not nested and obs_keys:
        raise ConfigError(
            f"env.obs_keys={list(obs_keys)} picks entries of a Dict / Tuple observation, but "
            f"this one is {space}: remove env.obs_keys"
        )
    if nested:
        return NestedConverter(space, obs_keys, symbolic, exclude)
    return FlatConverter(space, keep, symbolic)


def action_spec(space: gym.Space) -> Spec:
    if isinstance(space, gym.spaces.Discrete):
        return Spec((), torch.int64, n=int(space.n), low=(float(space.start),))
    if isinstance(space, gym.spaces.Box):
        return Spec(
            tuple(space.shape),
            torch.float32,
            low=tuple(space.low.reshape(-1).tolist()),
            high=tuple(space.high.reshape(-1).tolist()),
        )
    if isinstance(space, gym.spaces.MultiDiscrete) and space.nvec.ndim == 1:
        nvec = tuple(int(n) for n in space.nvec)
        return Spec((len(nvec),), torch.int64, nvec=nvec, low=tuple(float(s) for s in space.start))
    raise ConfigError(
        f"unsupported action space {space}: rltool handles Discrete, 1-D MultiDiscrete and Box "
        "actions"
    )


class ActionMap(torch.nn.Module):
    """Policy action <-> env action of an action :class:`Spec` (the one conversion the env,
    ``load_policy`` and the exported step all use): a ``Discrete`` / ``MultiDiscrete`` action
    gets the space's start added (``spec.low``), a continuous one is clipped to its ``Box``
    bounds (the Gaussian's sample is unbounded). Tensors in, tensors out, shapes kept ([B] int64,
    [B, k] int64, [B, *shape] float32); export-safe (its bounds are buffers)."""

    def __init__(self, spec: Spec):
        super().__init__()
        self.discrete = spec.discrete or spec.multi_discrete
        if self.discrete:
            low = torch.tensor([int(s) for s in spec.low or (0,)], dtype=torch.int64)
            self.offset = bool(low.any())  # no start: the action is the env action (no op)
            self.register_buffer("low", low if spec.multi_discrete else low[0])
        else:
            self.offset = False
            bounds = [
                torch.tensor(b, dtype=torch.float32).reshape(spec.shape)
                for b in (spec.low, spec.high)
            ]
            self.register_buffer("low", bounds[0])
            self.register_buffer("high", bounds[1])

    def forward(self, action: torch.Tensor) -> torch.Tensor:
        """The env action of a policy action."""
        if self.discrete:
            return action + self.low if self.offset else action
        return torch.minimum(torch.maximum(action, self.low), self.high)

    def inverse(self, env_action: torch.Tensor) -> torch.Tensor:
        """The policy action of an env action (a continuous one as it is: clipping keeps
        actions inside the bounds, where the two agree)."""
        if self.discrete:
            return env_action - self.low if self.offset else env_action
        return env_action
