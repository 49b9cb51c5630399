"""A space rltool cannot encode (Graph, Sequence) is refused with one line naming the entry and
the fix (env.obs_keys); picking the other entries works."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from rltool.envs.spaces import make_converter
from rltool.errors import ConfigError

GRAPH = gym.spaces.Graph(node_space=gym.spaces.Box(0, 1, (2,)), edge_space=None)


def test_a_graph_entry_names_itself_and_env_obs_keys():
    space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,), np.float32), "g": GRAPH})
    with pytest.raises(ConfigError) as e:
        make_converter(space)
    msg = str(e.value)
    assert "\n" not in msg and "observation entry 'g' is Graph" in msg and "env.obs_keys" in msg
    assert list(make_converter(space, obs_keys=["pos"]).spec.entries) == ["pos"]


def test_a_graph_observation_is_refused_in_one_line():
    with pytest.raises(ConfigError, match=r"^unsupported observation space Graph") as e:
        make_converter(GRAPH)
    assert "\n" not in str(e.value)
