"""Tiny envs with known dynamics for the tests (importable by async workers: tests/ is on the path).

FakeCount: observation [t, k] where t counts steps since the reset and k counts resets of this env;
reward 1 + action; terminates when t == terminate_at (if set); truncation comes from TimeLimit
(max_episode_steps)."""

from __future__ import annotations

import faulthandler
import os
import signal
import time

import gymnasium as gym
import numpy as np


class CountEnv(gym.Env):
    def __init__(self, terminate_at: int | None = None, continuous: bool = False):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = (
            gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        )
        self.terminate_at, self.t, self.k = terminate_at, 0, -1

    def _obs(self):
        return np.array([self.t, self.k], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.k = 0, self.k + 1
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        reward = 1.0 + float(np.asarray(action).reshape(-1)[0])
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), reward, terminated, False, {}


class DiscreteObsEnv(gym.Env):
    """Observation Discrete(3) cycling 0, 1, 2; never ends."""

    observation_space = gym.spaces.Discrete(3)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return 0, {}

    def step(self, action):
        self.t += 1
        return self.t % 3, 0.0, False, False, {}


class NestedEnv(gym.Env):
    """Dict observation of known values: ``pos`` = [t, k] (float Box), ``dir`` = t % 4
    (Discrete(4, start=1): the env sends t % 4 + 1), ``image`` = a 6x6x2 uint8 grid filled with
    (10 * k + t) % 256, ``mission`` = text. Actions MultiDiscrete([3, 2]) when ``multi``: reward
    a0 + 10 a1 (else Discrete(2): reward the action). Terminates at t == terminate_at;
    truncation from TimeLimit. Has get_state / set_state (exact resume)."""

    def __init__(self, terminate_at: int | None = None, multi: bool = False, size: int = 6):
        self.observation_space = gym.spaces.Dict(
            {
                "pos": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
                "dir": gym.spaces.Discrete(4, start=1),
                "image": gym.spaces.Box(0, 255, (size, size, 2), np.uint8),
                "mission": gym.spaces.Text(20),
            }
        )
        self.action_space = gym.spaces.MultiDiscrete([3, 2]) if multi else gym.spaces.Discrete(2)
        self.terminate_at, self.size, self.t, self.k = terminate_at, size, 0, -1

    def _obs(self):
        image = np.full((self.size, self.size, 2), (10 * self.k + self.t) % 256, np.uint8)
        pos = np.array([self.t, self.k], np.float32)
        return {"pos": pos, "dir": self.t % 4 + 1, "image": image, "mission": "go"}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.k = 0, self.k + 1
        return self._obs(), {}

    def get_state(self) -> dict:  # the env state protocol (rltool/envs/state.py): exact resume
        return {"t": self.t, "k": self.k}

    def set_state(self, state: dict) -> None:
        self.t, self.k = state["t"], state["k"]

    def step(self, action):
        self.t += 1
        a = np.asarray(action).reshape(-1)
        reward = float(a[0] + 10 * a[1]) if a.size == 2 else float(a[0])
        terminated = self.terminate_at is not None and self.t >= self.terminate_at
        return self._obs(), reward, terminated, False, {}


class FlatImageEnv(NestedEnv):
    """NestedEnv's image alone, as the whole observation (a uint8 Box)."""

    def __init__(self, size: int = 6):
        super().__init__(size=size)
        self.observation_space = self.observation_space["image"]

    def _obs(self):
        return super()._obs()["image"]


class TupleObsEnv(DiscreteObsEnv):
    """Tuple(Discrete(3), Box(1)): (t % 3, [t])."""

    observation_space = gym.spaces.Tuple(
        (gym.spaces.Discrete(3), gym.spaces.Box(-np.inf, np.inf, (1,), np.float32))
    )

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return (0, np.zeros(1, np.float32)), {}

    def step(self, action):
        self.t += 1
        return (self.t % 3, np.array([self.t], np.float32)), 0.0, False, False, {}


class SequenceObsEnv(DiscreteObsEnv):
    observation_space = gym.spaces.Dict(
        {"a": gym.spaces.Discrete(3), "seq": gym.spaces.Sequence(gym.spaces.Discrete(2))}
    )


class QuadraticEnv(gym.Env):
    """One-step episodes whose return is a quadratic of the env's ``x`` (kwargs), whatever the
    policy does: ``10 - 10 (x - 0.3)^2`` plus a noise of scale ``noise`` drawn at the reset from
    its seed (each seed of a population ends apart). A search over ``env.kwargs.x`` has its
    optimum at 0.3."""

    OPTIMUM = 0.3
    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, x: float = 0.0, noise: float = 1.0):
        self.x, self.noise, self.offset = x, noise, 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.offset = self.noise * float(self.np_random.normal())
        return np.zeros(1, np.float32), {}

    def step(self, action):
        reward = 10.0 - 10.0 * (self.x - self.OPTIMUM) ** 2 + self.offset
        return np.zeros(1, np.float32), reward, True, False, {}


class FaultyEnv(gym.Env):
    """Never ends (no time limit); observation [t, k] as FakeCount (a Dict {"position": [t, k],
    "dir": t % 3} when ``dict_obs``), reward 1. At step ``at`` of its first episode the env
    goes wrong by ``fault``: ``raise`` (RuntimeError('boom') from step()), ``nan_reward``,
    ``inf_obs`` (position[1] = inf), ``shape`` (an observation of 3 values), ``bounds`` (t beyond
    the declared high of 1e6), ``exit`` (the process exits with code 3), ``kill`` / ``segv``
    (the process kills itself with SIGKILL / SIGSEGV), ``hang`` (step() never returns), or
    ``none`` (never ends). Only the env first reset with seed ``only_seed`` (the vector index for
    a run of seed 0) when that is set, and only envs first reset with a seed >= ``min_seed``
    (1_000_000: the eval envs). ``in_reset``: the first episode ends (terminated) at step ``at``
    and the reset that follows goes wrong instead (``nan_reward``: an inf observation there).
    ``once``: a file made when the fault fires, which stops it from firing again (a resume)."""

    def __init__(
        self,
        fault="none",
        at=5,
        only_seed=None,
        dict_obs=False,
        in_reset=False,
        min_seed=0,
        once=None,
    ):
        box = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"position": box, "dir": gym.spaces.Discrete(3)}) if dict_obs else box
        )
        self.action_space = gym.spaces.Discrete(2)
        self.fault, self.at, self.only_seed, self.dict_obs = fault, at, only_seed, dict_obs
        self.in_reset, self.min_seed, self.once = in_reset, min_seed, once
        self.t, self.k, self.seed = 0, -1, None

    def _fires(self, episode: int) -> bool:
        """Whether the fault fires now, in episode ``episode`` (0: the first)."""
        mine = self.only_seed is None or self.seed == self.only_seed
        mine &= (self.seed or 0) >= self.min_seed and self.k == episode
        if not mine or (self.once and os.path.exists(self.once)):
            return False
        if self.once:
            open(self.once, "w").close()
        if self.fault in ("exit", "kill", "segv", "hang"):
            _die(self.fault)
        return True

    def _obs(self, pos):
        return {"position": pos, "dir": self.t % 3} if self.dict_obs else pos

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.seed = seed if self.seed is None else self.seed
        self.t, self.k = 0, self.k + 1
        pos = np.array([self.t, self.k], np.float32)
        if self.in_reset and self._fires(1):
            if self.fault == "raise":
                raise RuntimeError("boom")
            pos = self._broken("inf_obs" if self.fault == "nan_reward" else self.fault, pos)
        return self._obs(pos), {}

    def _broken(self, fault, pos):
        if fault == "inf_obs":
            pos[1] = np.inf
        if fault == "shape":
            pos = np.zeros(3, np.float32)
        if fault == "bounds":
            pos[0] = 2e6
        return pos

    def step(self, action):
        self.t += 1
        pos, reward = np.array([self.t, self.k], np.float32), 1.0
        if self.in_reset:
            return self._obs(pos), reward, self.t == self.at and self.k == 0, False, {}
        broken = self.t == self.at and self._fires(0)
        if broken and self.fault == "raise":
            raise RuntimeError("boom")
        if broken and self.fault == "nan_reward":
            reward = float("nan")
        pos = self._broken(self.fault, pos) if broken else pos
        return self._obs(pos), reward, False, False, {}


def _die(how: str) -> None:
    """The process this env runs in dies or hangs (an async worker; or rltool itself)."""
    if how == "exit":
        os._exit(3)
    if how == "hang":
        time.sleep(3600)
    faulthandler.disable()  # pytest's dump of this worker's stack: noise in the test's output
    os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGSEGV)


class MaskedEnv(gym.Env):
    """Discrete(4) actions (MultiDiscrete([3, 2]) when ``multi``) of which a new random non-empty
    set is valid at each step (per factor), so the mask must be read every step. The mask is given
    by ``source``: ``obs`` (Dict observation {"pos": [t, 0], "action_mask": MultiBinary}), ``info``
    (``info["action_mask"]`` as int8, as Taxi; observation [t, 0]) or ``method``
    (``action_masks()``, as SB3). A valid action: reward 1; an invalid one is catastrophic: reward
    -100, terminated, counted in ``invalid`` and the class's ``INVALID``. Ends (terminated) at
    t == 20. ``bad``: ``empty`` (the mask at step 3 allows nothing), ``shape`` (one entry too
    many), ``float`` (a float32 mask)."""

    INVALID = 0  # invalid actions taken by every instance of this process

    def __init__(self, source="obs", multi=False, bad=None):
        self.sizes = [3, 2] if multi else [4]
        self.source, self.bad, n = source, bad, sum(self.sizes)
        pos = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_space = (
            gym.spaces.Dict({"pos": pos, "action_mask": gym.spaces.MultiBinary(n)})
            if source == "obs"
            else pos
        )
        self.action_space = (
            gym.spaces.MultiDiscrete(self.sizes) if multi else gym.spaces.Discrete(4)
        )
        self.t, self.invalid, self.mask = 0, 0, np.ones(n, np.int8)

    def _new_mask(self):
        parts = []
        for size in self.sizes:
            m = self.np_random.random(size) < 0.5
            m[self.np_random.integers(size)] = True
            parts.append(m)
        self.mask = np.concatenate(parts).astype(np.int8)
        if self.bad == "empty" and self.t == 3:
            self.mask[:] = 0

    def _given(self):  # the mask as the env hands it out (MethodMaskedEnv: action_masks())
        m = self.mask
        if self.bad == "shape":
            m = np.append(m, 1)
        return m.astype(np.float32) if self.bad == "float" else m

    def _out(self):
        pos = np.array([self.t, 0], np.float32)
        obs = {"pos": pos, "action_mask": self.mask.copy()} if self.source == "obs" else pos
        return obs, ({"action_mask": self._given()} if self.source == "info" else {})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        self._new_mask()
        return self._out()

    def step(self, action):
        a = np.asarray(action).reshape(-1)
        offsets = np.cumsum([0, *self.sizes[:-1]])
        valid = all(self.mask[o + int(x)] for o, x in zip(offsets, a, strict=True))
        self.t += 1
        if not valid:
            self.invalid += 1
            MaskedEnv.INVALID += 1
        self._new_mask()
        obs, info = self._out()
        return obs, (1.0 if valid else -100.0), (not valid) or self.t >= 20, False, info


class MethodMaskedEnv(MaskedEnv):
    """MaskedEnv whose mask comes from ``action_masks()`` (SB3's MaskablePPO protocol)."""

    def action_masks(self):
        return self._given()


MASKED = {  # id -> MaskedEnv kwargs
    "FakeMaskedObs-v0": {"source": "obs"},
    "FakeMaskedInfo-v0": {"source": "info"},
    "FakeMaskedMethod-v0": {"source": "method"},
    "FakeMaskedMulti-v0": {"source": "obs", "multi": True},
    "FakeMaskedEmpty-v0": {"source": "info", "bad": "empty"},
    "FakeMaskedShape-v0": {"source": "info", "bad": "shape"},
    "FakeMaskedFloat-v0": {"source": "method", "bad": "float"},
}


FAULTY = {  # id -> FaultyEnv kwargs
    "FakeBoom-v0": {"fault": "raise"},
    "FakeNanReward-v0": {"fault": "nan_reward"},
    "FakeInfObs-v0": {"fault": "inf_obs"},
    "FakeInfDictObs-v0": {"fault": "inf_obs", "dict_obs": True},
    "FakeShapeChange-v0": {"fault": "shape"},
    "FakeOffBounds-v0": {"fault": "bounds"},
    "FakeEndless-v0": {"fault": "none"},
}


def register() -> None:
    for name, kwargs in FAULTY.items():
        if name not in gym.registry:
            gym.register(name, entry_point=f"{__name__}:FaultyEnv", kwargs=kwargs)
    for name, kwargs in MASKED.items():
        if name not in gym.registry:
            cls = "MethodMaskedEnv" if kwargs["source"] == "method" else "MaskedEnv"
            gym.register(name, entry_point=f"{__name__}:{cls}", kwargs=kwargs)
    for name, cls in [
        ("FakeCount-v0", CountEnv),
        ("FakeDiscreteObs-v0", DiscreteObsEnv),
        ("FakeNested-v0", NestedEnv),
        ("FakeTupleObs-v0", TupleObsEnv),
        ("FakeFlatImage-v0", FlatImageEnv),
        ("FakeSequenceObs-v0", SequenceObsEnv),
        ("FakeQuadratic-v0", QuadraticEnv),
    ]:
        if name not in gym.registry:
            gym.register(name, entry_point=f"{__name__}:{cls.__name__}")


register()
