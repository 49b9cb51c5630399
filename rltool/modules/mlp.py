"""Plain MLP blocks with orthogonal init (as CleanRL and SB3 do for PPO)."""

from __future__ import annotations

import math

from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


def init_linear(layer: nn.Linear, gain: float = math.sqrt(2)) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(in_features: int, sizes: list[int], activation: str = "tanh") -> nn.Sequential:
    """[*, in_features] -> [*, sizes[-1]] (or identity when ``sizes`` is empty)."""
    layers: list[nn.Module] = []
    for size in sizes:
        layers += [init_linear(nn.Linear(in_features, size)), ACTIVATIONS[activation]()]
        in_features = size
    return nn.Sequential(*layers)


def out_features(in_features: int, sizes: list[int]) -> int:
    return sizes[-1] if sizes else in_features
