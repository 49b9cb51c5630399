"""Faults of the user's env, reported as the env's (:class:`~rltool.errors.EnvError`, exit 4).

:class:`EnvGuard` stands around every ``reset`` / ``step`` of a :class:`~rltool.envs.VectorEnv`:

- an exception raised inside the env becomes one line naming the env id, the vector index (the
  sync backend: the frame of gymnasium's loop; async: the worker that died), the step (the
  VectorEnv's vector steps, 1-based) and the original exception, kept as ``__cause__``;
- NaN / inf in the reward or a float observation entry is always caught: one ``isfinite().all()``
  per step over the batch for each; which env and entry is looked for only on a failure;
- a process fault (an async worker that dies) or a call that does not return within
  ``env.step_timeout_s`` is the env's too (:mod:`rltool.envs.workers`);
- ``env.check`` adds the full check of each observation against the declared space
  (``space.contains``: shape, bounds, Discrete range): ``always`` every step, ``never``, or
  ``auto``: the first reset and the first :data:`AUTO_STEPS` vector steps (a space the env does
  not keep shows at once), then the finiteness check alone.
"""

from __future__ import annotations

import math
import multiprocessing
import time
import warnings

import gymnasium as gym
import numpy as np
import torch

from rltool.envs import workers
from rltool.errors import EnvError
from rltool.specs import VECTOR, CompositeSpec, Spec

AUTO_STEPS = 100  # env.check=auto: vector steps checked against the space after the build

CHECK_MODES = ("auto", "always", "never")


def float_entries(spec: Spec | CompositeSpec) -> list[str | None]:
    """The observation entries that can hold NaN / inf: float vectors (None: a flat observation).
    One-hot codes and uint8 images cannot."""
    if isinstance(spec, CompositeSpec):
        return [k for k, s in spec.entries.items() if _can_be_nan(s)]
    return [None] if _can_be_nan(spec) else []


def _can_be_nan(spec: Spec) -> bool:
    return spec.kind == VECTOR and spec.dtype.is_floating_point


class EnvGuard:
    """Checks of one vector env's results; :meth:`error` builds the one-line EnvError."""

    def __init__(
        self,
        vec_env,
        env_id: str,
        check: str,
        obs_spec: Spec | CompositeSpec,
        timeout_s: float | None = None,
    ):
        if check not in CHECK_MODES:
            raise ValueError(f"check={check!r}: choose one of {', '.join(CHECK_MODES)}")
        self.vec_env, self.env_id, self.check = vec_env, env_id, check
        self.space = vec_env.single_observation_space
        self.full_until = {"always": math.inf, "auto": AUTO_STEPS, "never": 0}[check]
        self.floats = float_entries(obs_spec)
        self.steps = 0  # vector steps taken (the step being taken, while in it)
        self.is_async = isinstance(vec_env, gym.vector.AsyncVectorEnv)
        # the call into the env in progress (its name, its start on the monotonic clock; None:
        # none), read by the watchdogs of rltool/envs/workers.py from other threads
        self.calling, self.since = "step", None
        self.timeout_s, self.broken = timeout_s, False  # broken: a worker died or hangs
        self.watchdog = None
        if timeout_s is not None and not self.is_async:
            self.watchdog = workers.Watchdog(self, timeout_s)
        workers.LIVE.add(self)

    def error(self, what: str, index: int | None = None, cause=None) -> EnvError:
        where = f"env {self.env_id}" + (f", env {index}" if index is not None else "")
        err = EnvError(f"{where}, step {self.steps}: {what}")
        err.__cause__ = cause
        return err

    # ---- exceptions ----
    def call(self, name: str, fn, *args, **kwargs):
        """``fn(*args, **kwargs)`` (the vector env's ``name``: "step" / "reset"); what it raises
        is an EnvError. AsyncVectorEnv logs a dead worker's traceback as warnings before it
        re-raises: they become a note of the cause (shown by --debug), not lines on stderr."""
        self.calling, self.since = name, time.monotonic()
        try:
            if not self.is_async:
                return fn(*args, **kwargs)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    out = self._async_call(name, fn, args, kwargs)
                except Exception as e:
                    e.add_note("\n".join(str(w.message) for w in caught))
                    raise
            for w in caught:  # nothing failed: the warnings are someone else's, shown as were
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)
            return out
        except Exception as e:  # noqa: BLE001 - the user's env: reported as its fault
            raise self.raised(e, name) from e
        finally:
            self.since = None

    def _async_call(self, name: str, fn, args, kwargs):
        """``fn(*args, **kwargs)``; within ``timeout_s`` where set (gymnasium's async / wait)."""
        if self.timeout_s is None:
            return fn(*args, **kwargs)
        if name == "step":
            self.vec_env.step_async(*args)
            return self.vec_env.step_wait(timeout=self.timeout_s)
        self.vec_env.reset_async(**kwargs)
        return self.vec_env.reset_wait(timeout=self.timeout_s)

    def hang_text(self, call: str) -> str:
        return f"{call}() did not return within {self.timeout_s:g} s (env.step_timeout_s)"

    def _process_fault(self, exc: Exception, call: str) -> EnvError | None:
        """The EnvError of a worker that died or hangs (the vector env is then shut down)."""
        if not self.is_async:
            return None
        if isinstance(exc, multiprocessing.TimeoutError):
            found = (workers.silent(self.vec_env), self.hang_text(call))
        elif isinstance(exc, EOFError | BrokenPipeError | ConnectionResetError) and not any(
            p is None
            for p in self.vec_env.parent_pipes  # None: a worker whose env raised
        ):  # a pipe whose other end is gone
            died = workers.death(self.vec_env)
            found = died and (died[0], f"its worker process {died[1]} in {call}()")
        else:
            return None
        if not found:
            return None
        self.broken = True
        workers.shutdown(self.vec_env)
        return self.error(found[1], found[0], exc)

    def close(self) -> None:
        """Closes the vector env: at once where a worker died, hangs or a call was cut short."""
        if self.watchdog is not None:
            self.watchdog.stop()
        workers.LIVE.discard(self)
        if self.is_async and (self.broken or self.since is not None or _pending(self.vec_env)):
            workers.shutdown(self.vec_env)
        else:
            self.vec_env.close()

    def raised(self, exc: Exception, call: str) -> EnvError:
        """The EnvError for ``exc`` raised by the vector env's ``call`` ("step" / "reset")."""
        fault = self._process_fault(exc, call)
        if fault is not None:
            return fault
        frame, inner = _vector_frames(exc, self.vec_env)
        if _is_batching(exc, frame):  # gymnasium could not batch the observations: one is off
            found = self._off_space_rows(getattr(self.vec_env, "_env_obs", None))
            if found is not None:
                return self.error(found[1], found[0], exc)
        index = frame.f_locals.get("i") if frame is not None and inner is not None else None
        if inner is not None and inner.f_code.co_name in ("step", "reset"):
            call = inner.f_code.co_name  # SAME_STEP: a step's reset happens inside step()
        if index is None:
            index = _dead_worker(self.vec_env)
        what = f"{call}() raised {type(exc).__name__}: {_first_line(exc)}"
        return self.error(what, index if isinstance(index, int) else None, exc)

    def converted(self, convert, raw):
        """``convert(raw)``; a failure is the observation's (off its space) when a row is."""
        try:
            return convert(raw)
        except Exception as e:  # noqa: BLE001 - whatever the converter chokes on, say where
            found = self._off_space_rows(_rows(self.space, raw, self.vec_env.num_envs))
            if found is not None:
                raise self.error(found[1], found[0], e) from e
            what = f"observation could not be read ({type(e).__name__}: {_first_line(e)})"
            raise self.error(what, None, e) from e

    # ---- values ----
    def finite(self, obs, reward: np.ndarray | None, what: str = "observation") -> None:
        """Raise where the reward [B] or a float observation entry [B, ...] is NaN / inf."""
        if reward is not None and not np.isfinite(reward).all():
            i = int(np.flatnonzero(~np.isfinite(reward))[0])
            raise self.error(f"reward is {_name(float(reward[i]))}", i)
        for key in self.floats:
            x = obs if key is None else obs.get(key)
            # numpy on the CPU: a quarter of torch's isfinite().all() dispatch cost per step
            ok = np.isfinite(x.numpy()).all() if x.device.type == "cpu" else torch.isfinite(x).all()
            if not ok:
                flat = x.reshape(x.shape[0], -1)
                i, j = (~torch.isfinite(flat)).nonzero()[0].tolist()
                entry = what if key is None else f'{what} entry "{key}"'
                raise self.error(f"{entry}[{j}] is {_name(float(flat[i, j]))}", i)

    def due(self) -> bool:
        """Whether this step gets the full space check."""
        return self.steps <= self.full_until

    def in_space(self, raw, finals=None, mask=None) -> None:
        """Raise where an observation (or a final one, where ``mask``) is off the space."""
        found = self._off_space_rows(_rows(self.space, raw, self.vec_env.num_envs))
        if found is None and mask is not None and mask.any():
            rows = [finals[i] if m else None for i, m in enumerate(mask)]
            found = self._off_space_rows(rows, "final observation")
        if found is not None:
            raise self.error(found[1] + " (env.check=never skips this check)", found[0])

    def _off_space_rows(self, rows, what: str = "observation"):
        """(index, what is wrong) of the first row off the space, or None."""
        for i, row in enumerate(rows or ()):
            if row is None:
                continue
            problem = off_space(self.space, row, what)
            if problem is not None:
                return i, problem
        return None


def off_space(space: gym.Space, x, name: str = "observation") -> str | None:
    """What is wrong with ``x`` for ``space`` (one clause), or None where it fits."""
    try:
        if space.contains(x):
            return None
    except Exception:  # noqa: BLE001 - a value contains() cannot even compare is off the space
        pass
    if isinstance(space, gym.spaces.Dict) and isinstance(x, dict):
        subs = ((f'{name} entry "{k}"', s, x.get(k)) for k, s in space.spaces.items())
        return next((p for n, s, v in subs if (p := off_space(s, v, n)) is not None), None)
    if isinstance(space, gym.spaces.Tuple) and isinstance(x, tuple) and len(x) == len(space):
        pairs = enumerate(zip(space, x, strict=True))
        subs = ((f'{name} entry "{i}"', s, v) for i, (s, v) in pairs)
        return next((p for n, s, v in subs if (p := off_space(s, v, n)) is not None), None)
    if isinstance(space, gym.spaces.Box):
        return _off_box(space, np.asarray(x), name)
    return f"{name} {_short(x)} is not in the declared space {space}"


def _off_box(space: gym.spaces.Box, x: np.ndarray, name: str) -> str:
    if x.shape != space.shape:
        return f"{name} has shape {x.shape}, the space declares {space.shape}"
    if not np.can_cast(x.dtype, space.dtype):
        return f"{name} has dtype {x.dtype}, the space declares {space.dtype}"
    bad = ~((x >= space.low) & (x <= space.high))
    j = np.unravel_index(int(np.flatnonzero(bad)[0]), x.shape) if bad.any() else None
    if j is None:
        return f"{name} {_short(x)} is not in the declared space {space}"
    at = f"{name}[{', '.join(map(str, j))}]"
    if not np.isfinite(x[j]):
        return f"{at} is {_name(float(x[j]))}"
    return f"{at} = {x[j]:g} is outside the declared bounds [{space.low[j]:g}, {space.high[j]:g}]"


def _rows(space: gym.Space, raw, n: int) -> list:
    """The batched ``raw`` as ``n`` single observations of ``space``."""

    def row(s, r, i):
        if isinstance(s, gym.spaces.Dict) and isinstance(r, dict):
            return {k: row(sub, r[k], i) for k, sub in s.spaces.items() if k in r}
        if isinstance(s, gym.spaces.Tuple) and isinstance(r, tuple):
            return tuple(row(sub, v, i) for sub, v in zip(s, r, strict=False))
        return r[i]

    try:
        return [row(space, raw, i) for i in range(n)]
    except Exception:  # noqa: BLE001 - a batch that cannot even be split: no row to blame
        return []


def _vector_frames(exc: BaseException, vec_env):
    """(the vector env's own step / reset frame, the frame it called that raised) in ``exc``'s
    traceback; (None, None) where the vector env's frame is not in it (async, envpool)."""
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_locals.get("self") is vec_env:
            nxt = tb.tb_next
            return tb.tb_frame, nxt.tb_frame if nxt is not None else None
        tb = tb.tb_next
    return None, None


def _is_batching(exc: BaseException, vector_frame) -> bool:
    """Whether ``exc`` rose from gymnasium's batching of observations (vector/utils), after the
    vector env's frame."""
    if vector_frame is None:
        return False
    tb, after = exc.__traceback__, False
    while tb is not None:
        after |= tb.tb_frame is vector_frame
        if after and "gymnasium/vector/utils" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            return True
        tb = tb.tb_next
    return False


def _dead_worker(vec_env) -> int | None:
    """AsyncVectorEnv closes the pipe of a worker whose env raised: its index."""
    pipes = getattr(vec_env, "parent_pipes", None)
    dead = [i for i, p in enumerate(pipes or ()) if p is None]
    return dead[0] if dead else None


def _pending(vec_env) -> bool:
    """Whether an async vector env waits on a call's answers (a step cut short by a signal)."""
    state = getattr(vec_env, "_state", None)
    return state is not None and getattr(state, "value", None) not in (None, "default")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _name(v: float) -> str:
    return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")


def _short(x) -> str:
    text = str(x) if isinstance(x, np.ndarray | np.generic) else repr(x)
    return text if len(text) <= 60 else text[:57] + "..."
