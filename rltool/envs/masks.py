"""Action masks (``env.action_mask``): which actions the env allows at each step.

Sources: ``obs:<entry>`` (an entry of a Dict / Tuple observation; nested: ``outer.inner``),
``info:<key>`` (the reset's and each step's info), ``method:<name>`` (called on every sub-env
after each reset and step, as SB3's MaskablePPO calls ``action_masks()``). ``auto`` looks for an
``action_mask`` entry of the observation space, then an ``action_masks`` method of the env, then
``info["action_mask"]`` in the reset info of a throwaway probe env (never the training envs, so
no env's RNG moves); none found: no mask, every action valid. ``none``: ignored.

A mask is [B, n] bool: n is Discrete's ``n``, or ``sum(nvec)`` for MultiDiscrete (each factor's
mask, concatenated, as SB3). Integer 0 / 1 masks are read as bool. A mask of the wrong shape or
dtype is a ConfigError at the first reset (before training); a root mask that allows no action
(in some factor) is an EnvError naming the env, its index and the step.

``("next", "action_mask")`` is the mask of the observation the step led to: the final one where
an episode ended, read from ``info["final_obs"]`` / ``info["final_info"]``; a method cannot be
asked about a final state (the env has reset), so there every action counts as valid.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from rltool.envs.spaces import space_leaves
from rltool.errors import ConfigError, UserError

AUTO_ENTRY, AUTO_METHOD, AUTO_INFO = "action_mask", "action_masks", "action_mask"
KINDS = ("obs", "info", "method")


def _entries(space: gym.Space) -> dict[str, tuple]:
    """name -> (path, space) of a Dict / Tuple space's leaves ({} for a flat space)."""
    if not isinstance(space, gym.spaces.Dict | gym.spaces.Tuple):
        return {}
    return {".".join(str(k) for k in p): (p, s) for p, s in space_leaves(space)}


def _sizes(action_space: gym.Space) -> list[int] | None:
    """Each factor's number of actions (Discrete: one factor), None for other spaces."""
    if isinstance(action_space, gym.spaces.Discrete):
        return [int(action_space.n)]
    if isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return [int(n) for n in action_space.nvec]
    return None


def resolve(setting: str, obs_space, action_space, probe: gym.Env | None = None):
    """The :class:`MaskSource` of ``env.action_mask`` (None: no mask). ``probe``: one env of the
    same id (gymnasium backends) for ``auto``'s method / info look-up and a named method's check."""
    if setting == "none":
        return None
    entries = _entries(obs_space)
    kind, _, name = setting.partition(":")
    if setting == "auto":
        if AUTO_ENTRY in entries:
            kind, name = "obs", AUTO_ENTRY
        elif probe is not None and callable(_attr(probe, AUTO_METHOD)):
            kind, name = "method", AUTO_METHOD
        elif probe is not None and AUTO_INFO in _reset_info(probe):
            kind, name = "info", AUTO_INFO
        else:
            return None
    sizes = _sizes(action_space)
    if sizes is None:
        raise ConfigError(
            f"env.action_mask={setting} found a mask ({kind}:{name}), but masks need Discrete or "
            f"MultiDiscrete actions and this env's are {action_space}: set env.action_mask=none"
        )
    if kind == "obs":
        _check_entry(setting, name, entries, sum(sizes))
    if kind == "method" and probe is not None and not callable(_attr(probe, name)):
        raise ConfigError(
            f"env.action_mask={setting}: the env has no method {name!r}; name one it has, or "
            "choose info:<key> / obs:<entry> / none"
        )
    return MaskSource(kind, name, sizes, entries.get(name, ((),))[0])


def _attr(env: gym.Env, name: str):
    try:
        return env.get_wrapper_attr(name)
    except AttributeError:
        return None


def _reset_info(probe: gym.Env) -> dict:
    try:
        return probe.reset()[1]
    except Exception:  # noqa: BLE001 - the real reset reports the env's fault as an EnvError
        return {}


def _check_entry(setting: str, name: str, entries: dict, n: int) -> None:
    if name not in entries:
        have = ", ".join(entries) or "none (the observation is not a Dict / Tuple)"
        raise ConfigError(
            f"env.action_mask={setting}: the observation has no entry {name!r}; its entries: {have}"
        )
    space = entries[name][1]
    dtype = np.dtype(getattr(space, "dtype", None) or np.float64)
    if tuple(space.shape or ()) != (n,) or dtype.kind not in "biu":
        raise ConfigError(
            f"env.action_mask={setting}: entry {name!r} is {space}, but a mask is [{n}] bool or "
            "0 / 1 integers (one per action, the factors concatenated for MultiDiscrete)"
        )


def _present(info: dict, key: str, i: int) -> bool:
    flags = info.get(f"_{key}")
    return True if flags is None else bool(flags[i])


class MaskSource:
    """Reads the masks [B, n] bool of one kind of source (see the module docstring)."""

    def __init__(self, kind: str, name: str, sizes: list[int], path: tuple = ()):
        self.kind, self.name, self.sizes, self.path = kind, name, sizes, path
        self.n = sum(sizes)
        self.offsets = np.cumsum([0, *sizes[:-1]])
        self.checked = False  # the first read is checked for shape, dtype and values

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"

    def excluded(self, obs_keys) -> tuple[str, ...]:
        """The observation entries the encoder must not see: the mask's, unless listed."""
        return (self.name,) if self.kind == "obs" and not obs_keys else ()

    def _as_mask(self, arr, batch: int, guard=None) -> np.ndarray:
        arr = np.asarray(arr)
        if arr.dtype == object:  # a list of per-env arrays
            arr = np.stack([np.asarray(a) for a in arr])
        ok = arr.shape == (batch, self.n) and arr.dtype.kind in "biu"
        if ok and not self.checked and arr.dtype.kind != "b":
            ok = bool(np.isin(arr, (0, 1)).all())
        if not ok:
            what = (
                f"env.action_mask={self.label} gave a mask of shape {list(arr.shape[1:])} and "
                f"dtype {arr.dtype}, but this env needs [{self.n}] bool (or 0 / 1 integers): one "
                "entry per action, the factors concatenated for MultiDiscrete"
            )
            if self.checked and guard is not None:
                raise guard.error(what)
            raise ConfigError(what)
        self.checked = True
        return arr if arr.dtype == bool else arr.astype(bool)

    def read(self, vec_env, raw, info: dict, guard, rows: np.ndarray | None = None) -> np.ndarray:
        """The masks [B, n] of the observations ``raw`` (and the ``info`` that came with them);
        ``rows`` [B] bool: only these envs were reset (the others' rows are not read)."""
        B = vec_env.num_envs
        if self.kind == "obs":
            x = raw
            for k in self.path:
                x = x[k]
            return self._as_mask(x, B, guard)
        if self.kind == "method":
            return self._as_mask(np.stack(vec_env.call(self.name)), B, guard)
        have = np.asarray(info.get(f"_{self.name}", np.full(B, self.name in info)), bool)
        lacking = ~have if rows is None else rows & ~have
        if lacking.any():
            missing = int(np.flatnonzero(lacking)[0])
            raise guard.error(f"info has no {self.name!r} (env.action_mask={self.label})", missing)
        return self._as_mask(info[self.name], B, guard)

    def final(self, root: np.ndarray, info: dict, done: np.ndarray) -> np.ndarray:
        """The masks of the observations each step led to: ``root`` where not ``done``, the final
        observation's where done (all True where the source cannot say: a method)."""
        out = root.copy()
        rows = np.flatnonzero(done)
        for i in rows:
            out[i] = self._final_one(info, i)
        return out

    def _final_one(self, info: dict, i: int) -> np.ndarray:
        if self.kind == "obs":
            x = info["final_obs"][i]
            for k in self.path:
                x = x[k]
            return np.asarray(x).astype(bool)
        if self.kind == "info":
            fin = info.get("final_info")
            if isinstance(fin, dict) and self.name in fin and _present(fin, self.name, i):
                return np.asarray(fin[self.name][i]).astype(bool)
            if isinstance(fin, np.ndarray) and isinstance(fin[i], dict) and self.name in fin[i]:
                return np.asarray(fin[i][self.name]).astype(bool)
        return np.ones(self.n, bool)

    def check_some(self, mask: np.ndarray, guard) -> None:
        """EnvError where a root mask allows no action (in some factor): the policy must act."""
        some = np.logical_or.reduceat(mask, self.offsets, axis=1)
        if not some.all():
            i, f = (int(x[0]) for x in np.nonzero(~some))
            factor = f" in factor {f}" if len(self.sizes) > 1 else ""
            raise guard.error(f"action mask ({self.label}) allows no action{factor}", i)

    def read_one(self, observation, info: dict | None, env) -> np.ndarray:
        """One env's mask [n] bool outside a vector env (``rltool.load_policy``): from the raw
        ``observation``, its ``info`` or ``env``'s method."""
        if self.kind == "obs":
            x = observation
            for k in self.path:
                x = x[k]
        elif self.kind == "info" and info is not None and self.name in info:
            x = info[self.name]
        elif self.kind == "method" and env is not None:
            x = (env.get_wrapper_attr if hasattr(env, "get_wrapper_attr") else getattr)(self.name)()
        else:
            need = "info=<the info of the reset / step>" if self.kind == "info" else "env=<the env>"
            raise UserError(
                f"this policy acts on action masks from {self.label}: pass action_mask=<the mask> "
                f"or {need}"
            )
        return np.asarray(x).astype(bool)
