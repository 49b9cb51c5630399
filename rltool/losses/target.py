"""What the replay losses (DQN, SAC) share: a target network's parameters, and the burn-in that
warms a window's recurrent states without gradient."""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase
from torch import nn


class TargetParams:
    """A copy of ``module``'s parameters and buffers in a TensorDict (``params``), swapped into
    the module for a target pass (:meth:`swap`): no second copy of the module. ``updates``
    counts :meth:`update` calls (a hard copy every ``every``)."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.params = TensorDict.from_module(module).data.clone()
        self.updates = 0

    def swap(self):
        """A context in which ``module`` computes with the target parameters."""
        return self.params.to_module(self.module)

    @torch.no_grad()
    def update(self, kind: str = "soft", tau: float = 0.005, every: int = 1) -> None:
        """After an optimiser step: ``soft`` moves the target by ``tau`` towards the online
        parameters (Polyak); ``hard`` copies them every ``every`` updates."""
        self.updates += 1
        online = TensorDict.from_module(self.module).data
        if kind == "soft":
            self.params.lerp_(online, tau)
        elif self.updates % every == 0:
            self.params.update_(online)

    def state_dict(self) -> dict:
        return {"target": self.params.to_dict(), "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.params.update_(TensorDict(state["target"], []))
        self.updates = int(state["updates"])


def warm(td: TensorDictBase, burn_in: int, states: Callable[[TensorDictBase], dict]):
    """td[burn_in:], its stored states replaced by the last of ``states(td[:burn_in])`` (the
    states after each burn-in step, {key: [burn_in, B, ...]}; computed without gradient, R2D2):
    the steps after burn-in start from a state the current parameters made."""
    if not burn_in:
        return td
    with torch.no_grad():
        after = states(td[:burn_in])
    rest = td[burn_in:].clone(recurse=False)
    for k, s in after.items():
        rest.set(k, s[-1].unsqueeze(0).expand(rest.shape[0], *s.shape[1:]))
    return rest
