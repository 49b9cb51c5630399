"""The steps before a rollout that PPO's training sequences start from (``loss.bptt_horizon``).

A recurrent policy's sequences are the rollout's env columns [T, B], each run from the state
stored at its first step: backpropagation through time reaches no further back than T steps.
With a horizon H > T, each env's last ``H - T`` steps are kept across rollouts (their memory
inputs, ``is_init``, stored states and the loss's entries), and every update trains on
[C + T, B]: the context first, run through the memory with the current weights and with
gradients, from the state stored at the context's first step; the loss counts only the
rollout's steps (``mask`` False on the context).

A context step before its env's current episode began cannot change anything (the memory
resets at ``is_init``), so the context is cut to the longest current episode among the envs:
``C = max over envs of the steps since its episode began`` (at most ``H - T``; 0 where the
rollout's first step is an episode's first). A horizon of ``episode`` is the same with
``H = loss.bptt_episode_cap``: every sequence starts at its episode's first step, from the
initial state, unless the episode is longer than the cap.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict, TensorDictBase

from rltool import keys as K

# what PPO's loss reads of a step besides the policy's inputs and states
LOSS_KEYS = (
    K.IS_INIT,
    K.ACTION,
    K.SAMPLE_LOG_PROB,
    K.STATE_VALUE,
    K.ADVANTAGE,
    K.VALUE_TARGET,
)


class SequenceContext:
    """Each env's last ``length`` steps, kept across rollouts, put before the next rollout.

    Args:
        length: the most steps kept per env (``H - T``); >= 1.
        keys: the entries kept of each step (the policy's inputs and state keys, and
            :data:`LOSS_KEYS`); a rollout must hold them all.
    """

    def __init__(self, length: int, keys: list):
        self.length, self.keys = int(length), list(dict.fromkeys(keys))
        self.steps: TensorDictBase | None = None  # [C, B], C <= length

    def extend(self, batch: TensorDictBase) -> TensorDictBase:
        """The rollout ``batch`` [T, B] with the context before it: [C + T, B] of the kept
        keys and ``mask`` [C + T, B, 1] (False on the context; a mask in ``batch`` is kept
        on its steps). ``batch`` itself where no context applies (C = 0). Keeps the last
        ``length`` steps of context and rollout for the next call."""
        kept = batch.select(*self.keys)
        context = self._needed(batch)
        whole = kept if self.steps is None else torch.cat([self.steps, kept], 0)
        self.steps = whole[-self.length :].clone()
        if context is None:
            return batch
        shape, dev = (*batch.batch_size, 1), batch.device
        mask = batch.get(K.MASK, None)
        kept = kept.set(
            K.MASK,
            torch.ones(shape, dtype=torch.bool, device=dev)
            if mask is None
            else mask.reshape(shape),
        )
        off = torch.zeros((context.shape[0], *shape[1:]), dtype=torch.bool, device=dev)
        return torch.cat([context.set(K.MASK, off), kept], 0)

    def _needed(self, batch: TensorDictBase) -> TensorDictBase | None:
        """The kept steps the next sequences need: back to the earliest start of an episode
        still running at the rollout's first step (None: none needed)."""
        if self.steps is None:
            return None
        is_init = self.steps.get(K.IS_INIT).reshape(self.steps.shape[0], -1)  # [C, B]
        c = is_init.shape[0]
        t = torch.arange(c, device=is_init.device).unsqueeze(1).expand_as(is_init)
        # the last step at which each env's episode began, -1 where it began before the context
        began = torch.where(is_init, t, torch.full_like(t, -1)).amax(0)
        since = torch.where(batch.get(K.IS_INIT)[0].reshape(-1), 0, c - began.clamp(min=0))
        n = int(since.max())
        return self.steps[c - n :].clone(False) if n > 0 else None

    def state_dict(self) -> dict:
        """The kept steps as {key: tensor [C, B, ...]} (empty before the first rollout)."""
        if self.steps is None:
            return {}
        return {"steps": self.steps.to_dict()}

    def load_state_dict(self, state: dict) -> None:
        steps = state.get("steps")
        if not steps:
            self.steps = None
            return
        first = next(iter(TensorDict(steps).values(True, True)))
        self.steps = TensorDict(steps, batch_size=first.shape[:2])
