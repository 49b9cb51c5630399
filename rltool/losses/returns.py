"""Returns: GAE over [T, B] rollouts.

Terminated steps bootstrap with 0; truncated ones from the value of the true final observation
(``("next", "state_value")``, which the collector fills); no advantage flows across ``done``.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase

from rltool import keys as K
from rltool.modules.scan import linear_scan


def gae(reward, value, next_value, terminated, done, gamma: float, lam: float):
    """All inputs [T, B, 1] (flags bool). Returns (advantage, value_target), [T, B, 1]."""
    delta = reward + gamma * next_value * (~terminated) - value
    decay = gamma * lam * (~done).to(delta.dtype)
    # A_t = delta_t + decay_t * A_{t+1}: a linear scan over reversed time
    adv = linear_scan(decay.flip(0), delta.flip(0)).flip(0)
    return adv, adv + value


@torch.no_grad()
def add_gae(td: TensorDictBase, gamma: float, lam: float) -> TensorDictBase:
    """Writes ``advantage`` and ``value_target`` into a [T, B] rollout."""
    nxt = td.get(K.NEXT)
    adv, target = gae(
        nxt.get(K.REWARD),
        td.get(K.STATE_VALUE),
        nxt.get(K.STATE_VALUE),
        nxt.get(K.TERMINATED),
        nxt.get(K.DONE),
        gamma,
        lam,
    )
    td.set(K.ADVANTAGE, adv)
    td.set(K.VALUE_TARGET, target)
    return td
