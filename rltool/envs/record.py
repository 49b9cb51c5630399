"""What a policy needs to know of its env, without the env: :class:`EnvRecord`.

The raw observation and action spaces, the converter's settings (``obs_keep``, ``obs_keys``,
symbolic images, the entries left out) and the action mask's source. From them come the env's
specs, its observation converter (raw numpy -> tensors), the mask reader and the
:class:`~rltool.envs.spaces.ActionMap`, exactly as the :class:`~rltool.envs.vector.VectorEnv`
builds them (it builds them from its own record). Checkpoints store the record as plain
containers (:meth:`EnvRecord.to_plain`: dicts, lists, numbers, strings and tensors, loaded with
``weights_only=True``), so ``load_policy`` and ``export`` build no env.

A space as plain containers: ``{"type": "Box", "shape", "dtype", "low", "high"}`` (bounds a
number where all are equal, else a tensor), ``{"type": "Discrete", "n", "start"}``,
``{"type": "MultiDiscrete", "nvec", "start", "dtype"}`` (tensors), ``{"type": "MultiBinary",
"n"}``, ``{"type": "Dict", "spaces": {key: space}}``, ``{"type": "Tuple", "spaces": [space]}``
and ``{"type": "Text"}`` (a text entry, which the converter leaves out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import gymnasium as gym
import numpy as np
import torch

from rltool.envs.masks import MaskSource
from rltool.envs.spaces import ActionMap, action_spec, is_text, make_converter
from rltool.specs import EnvSpecs, Spec

PLAIN_VERSION = 1  # the layout of to_plain's dict


def _bound(x: np.ndarray):
    """A Box bound: one number where all are equal (an image's 0 / 255), else a tensor."""
    flat = x.reshape(-1)
    if flat.size and (flat == flat[0]).all():
        return flat[0].item()
    return torch.from_numpy(np.ascontiguousarray(x))


def space_to_plain(space: gym.Space) -> dict | None:
    """``space`` as plain containers (see the module docstring); None for a space of another
    kind (a record of it is not stored: the env is built to learn it, as before records)."""
    if is_text(space):
        return {"type": "Text"}
    if isinstance(space, gym.spaces.Box):
        shape, dtype = list(space.shape), str(space.dtype)
        return {"type": "Box", "shape": shape, "dtype": dtype} | {
            "low": _bound(space.low),
            "high": _bound(space.high),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        nvec, start = (torch.from_numpy(np.array(a, np.int64)) for a in (space.nvec, space.start))
        return {"type": "MultiDiscrete", "nvec": nvec, "start": start, "dtype": str(space.dtype)}
    if isinstance(space, gym.spaces.MultiBinary):
        n = space.n
        return {"type": "MultiBinary", "n": int(n) if np.ndim(n) == 0 else [int(k) for k in n]}
    if isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        named = space.spaces.items() if isinstance(space, gym.spaces.Dict) else enumerate(space)
        subs = {k: space_to_plain(s) for k, s in named}
        if any(s is None for s in subs.values()):
            return None
        if isinstance(space, gym.spaces.Tuple):
            return {"type": "Tuple", "spaces": list(subs.values())}
        return {"type": "Dict", "spaces": subs}
    return None


def _array(b, shape: tuple, dtype: np.dtype) -> np.ndarray:
    return b.numpy() if torch.is_tensor(b) else np.full(shape, b, dtype)


def space_from_plain(d: dict) -> gym.Space:
    """The space :func:`space_to_plain` wrote."""
    kind = d["type"]
    if kind == "Box":
        shape, dtype = tuple(d["shape"]), np.dtype(d["dtype"])
        low, high = (_array(d[k], shape, dtype) for k in ("low", "high"))
        return gym.spaces.Box(low, high, shape, dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(d["n"], start=d["start"])
    if kind == "MultiDiscrete":
        nvec, start = d["nvec"].numpy(), d["start"].numpy()
        return gym.spaces.MultiDiscrete(nvec, np.dtype(d["dtype"]), start=start)
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(d["n"])
    if kind == "Dict":
        # (key, space) pairs keep the order: a dict would be sorted by gymnasium
        return gym.spaces.Dict([(k, space_from_plain(s)) for k, s in d["spaces"].items()])
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_plain(s) for s in d["spaces"]])
    if kind == "Text":
        return gym.spaces.Text(1)
    raise ValueError(f"unknown space record {kind!r}")


@dataclass
class EnvRecord:
    """An env's spaces and converter settings; ``mask``: its :class:`MaskSource` (None: no
    masks). Build the converter, specs, mask source and action map from it."""

    observation_space: gym.Space
    action_space: gym.Space
    obs_keep: list[int] | None = None
    obs_keys: list[str] | None = None
    symbolic: bool = False
    mask: MaskSource | None = field(default=None, compare=False)

    @cached_property
    def converter(self):
        """Batched raw observations -> tensors (:func:`rltool.envs.spaces.make_converter`)."""
        exclude = self.mask.excluded(self.obs_keys) if self.mask is not None else ()
        return make_converter(
            self.observation_space, self.obs_keep, self.obs_keys, self.symbolic, exclude
        )

    @cached_property
    def specs(self) -> EnvSpecs:
        mask = Spec((self.mask.n,), torch.bool) if self.mask is not None else None
        act = action_spec(self.action_space)
        return EnvSpecs(observation=self.converter.spec, action=act, action_mask=mask)

    def action_map(self) -> ActionMap:
        """A fresh :class:`ActionMap` of the action spec (a module: each owner moves its own)."""
        return ActionMap(self.specs.action)

    def to_plain(self) -> dict | None:
        """The record as plain containers (None where a space has no plain form)."""
        spaces = space_to_plain(self.observation_space), space_to_plain(self.action_space)
        if None in spaces:
            return None
        m = self.mask
        mask = None if m is None else {"kind": m.kind, "name": m.name, "sizes": list(m.sizes)}
        if m is not None:
            mask["path"] = list(m.path)
        return {
            "version": PLAIN_VERSION,
            "observation_space": spaces[0],
            "action_space": spaces[1],
            "obs_keep": None if self.obs_keep is None else list(self.obs_keep),
            "obs_keys": None if self.obs_keys is None else list(self.obs_keys),
            "symbolic": bool(self.symbolic),
            "mask": mask,
        }

    @classmethod
    def from_plain(cls, d: dict) -> EnvRecord:
        m = d["mask"]
        mask = None if m is None else MaskSource(m["kind"], m["name"], m["sizes"], tuple(m["path"]))
        return cls(
            space_from_plain(d["observation_space"]),
            space_from_plain(d["action_space"]),
            d["obs_keep"],
            d["obs_keys"],
            d["symbolic"],
            mask,
        )
