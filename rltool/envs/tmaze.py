"""A passive T-maze (after Ni et al., NeurIPS 2023): a long memory length, a credit-assignment
length of 1.

The first observation shows a cue of +1 or -1, drawn at reset from the env's ``np_random``. Then
a corridor of ``length`` (L) steps: any action moves one step forward, reward 0, and the
observation shows the position but not the cue (0). At the junction the action picks left (0) or
right (1): cue +1 means right (1), cue -1 means left (0); +1 reward for the cued side, -1 for the
other, and the episode terminates. An episode is L + 1 steps; a memoryless policy's return is 0
on average, a policy that remembers the cue for L steps gets 1.

Observation ``Box(-1, 1, (3,), float32)``: ``[cue, position / L, at_junction]``; the cue is 0
after the first step, the position runs 0, 1/L, ..., 1 and ``at_junction`` is 1 at position 1
only. Actions ``Discrete(2)``. Never truncated: the env has no time limit of its own, the episode
always ends at the junction.

Registered as ``TMaze-v0``; ``env=tmaze`` (``conf/env/tmaze.yaml``) builds it as
``rltool.envs.tmaze:TMaze-v0`` and its corridor length is ``env.kwargs.length``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

ENV_ID = "TMaze-v0"
LEFT, RIGHT = 0, 1


class TMazeEnv(gym.Env):
    """The passive T-maze of corridor length ``length`` (L >= 1); see the module docstring.

    Args:
        length: the corridor's steps between the cue and the junction (the memory length).
    """

    metadata = {"render_modes": []}

    def __init__(self, length: int = 20):
        if int(length) != length or length < 1:
            raise ValueError(f"length={length!r}: the corridor needs an integer length >= 1")
        self.length = int(length)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.cue, self.t = 0, 0  # t: steps taken in this episode (the position)

    def _obs(self) -> np.ndarray:
        cue = self.cue if self.t == 0 else 0
        return np.array([cue, self.t / self.length, self.t == self.length], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.cue = 1 if self.np_random.integers(2) else -1
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        if self.t < self.length:  # the corridor: forward whatever the action
            self.t += 1
            return self._obs(), 0.0, False, False, {}
        correct = RIGHT if self.cue > 0 else LEFT
        reward = 1.0 if int(action) == correct else -1.0
        return self._obs(), reward, True, False, {}

    def get_state(self) -> dict:
        """The episode in progress (rltool's env state protocol, :mod:`rltool.envs.state`)."""
        return {"cue": self.cue, "t": self.t}

    def set_state(self, state: dict) -> None:
        """Restores what :meth:`get_state` returned."""
        self.cue, self.t = int(state["cue"]), int(state["t"])


if ENV_ID not in gym.registry:  # a second import (a reload) would warn of an override
    gym.register(ENV_ID, entry_point=TMazeEnv)
