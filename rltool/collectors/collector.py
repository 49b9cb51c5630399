"""The collector: drives env and policy, returns rollouts as TensorDicts of batch [T, B].

The rollout is preallocated once from the env's specs, the policy's outputs and the policy's state
specs, and written in place. The per-step hot path calls the policy's tensor-level ``act``; the
TensorDict path (``use_tensordict=True``) builds a TensorDict per step and calls ``policy(td)``.
Both give identical rollouts (tested).

Recurrent state: the state *before* step t is stored at ``[t]``, the state after it under
``("next", key)``. Where an episode starts (``is_init``) the stored state is zeros, so a replay from
stored states is exact. The state is carried across batches.

Values: with a critic, ``("next", "state_value")`` is the bootstrap value of the step's next
observation: the value at t+1 inside the rollout, a value of the true final observation (with the
state after the step) where an episode was truncated, and one extra critic call after the last step.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rltool import keys as K
from rltool.envs.vector import VectorEnv
from rltool.modules.recurrent import recurrent_mode
from rltool.specs import Spec

_NEXT_ENV_KEYS = (
    K.OBSERVATION,
    K.REWARD,
    K.TERMINATED,
    K.TRUNCATED,
    K.DONE,
    K.EPISODE_RETURN,
    K.EPISODE_LENGTH,
)


class Collector:
    """Collects ``frames_per_batch`` frames per call to :meth:`collect` ([T, B], T = frames / B).

    The returned TensorDict is the collector's buffer: it is overwritten by the next call; clone it
    to keep it."""

    def __init__(
        self,
        env: VectorEnv,
        policy,
        frames_per_batch: int,
        *,
        seed: int | None = None,
        use_tensordict: bool = False,
        storing_device=None,
        bootstrap_values: bool | None = None,
    ):
        if frames_per_batch % env.num_envs:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} is not a multiple of num_envs={env.num_envs}"
            )
        self.env, self.policy, self.use_tensordict = env, policy, use_tensordict
        self.T, self.B = frames_per_batch // env.num_envs, env.num_envs
        self.storing_device = torch.device(storing_device or env.device)
        self.state_specs: dict[str, Spec] = dict(policy.state_specs)
        self.input_specs: dict[str, Spec] = dict(policy.input_specs)
        critic = getattr(policy, "has_critic", False)
        self.has_critic = critic if bootstrap_values is None else bootstrap_values and critic
        self.rollout = self._allocate()
        self._leaves = {
            k: self.rollout.get(k) for k in self.rollout.keys(include_nested=True, leaves_only=True)
        }
        self.frames = 0
        self._root = self._initial_root(seed)

    # ---- buffers ----
    def _output_specs(self) -> dict[str, torch.Tensor]:
        """Shapes of what the policy writes, from one call on the first observation."""
        probe_obs = self.env.specs.observation.zeros(self.B, device=self.env.device)
        inputs = {
            K.OBSERVATION: probe_obs,
            **{k: s.zeros(self.B) for k, s in self.input_specs.items()},
        }
        state = {k: s.zeros(self.B) for k, s in self.state_specs.items()}
        with torch.no_grad():
            out, _ = self.policy.act(inputs, state, torch.ones(self.B, 1, dtype=torch.bool))
        return out

    def _allocate(self) -> TensorDict:
        T, B, dev = self.T, self.B, self.storing_device
        specs = self.env.specs
        td = TensorDict({}, [T, B], device=dev)
        td[K.OBSERVATION] = specs.observation.zeros(T, B, device=dev)
        td[K.IS_INIT] = torch.zeros(T, B, 1, dtype=torch.bool, device=dev)
        for k, v in self._output_specs().items():
            td[k] = torch.zeros(T, B, *v.shape[1:], dtype=v.dtype, device=dev)
        for k, s in {**self.state_specs, **self.input_specs}.items():
            td[k] = s.zeros(T, B, device=dev)
        nxt = TensorDict(
            {
                K.OBSERVATION: specs.observation.zeros(T, B, device=dev),
                K.REWARD: specs.reward.zeros(T, B, device=dev),
                K.TERMINATED: torch.zeros(T, B, 1, dtype=torch.bool, device=dev),
                K.TRUNCATED: torch.zeros(T, B, 1, dtype=torch.bool, device=dev),
                K.DONE: torch.zeros(T, B, 1, dtype=torch.bool, device=dev),
                K.EPISODE_RETURN: torch.zeros(T, B, 1, device=dev),
                K.EPISODE_LENGTH: torch.zeros(T, B, 1, dtype=torch.int64, device=dev),
            },
            [T, B],
            device=dev,
        )
        for k, s in self.state_specs.items():
            nxt[k] = s.zeros(T, B, device=dev)
        if self.has_critic:
            nxt[K.STATE_VALUE] = torch.zeros(T, B, 1, device=dev)
        td[K.NEXT] = nxt
        return td

    def _initial_root(self, seed: int | None) -> dict[str, torch.Tensor]:
        """The first step's inputs: reset observation, is_init everywhere, zero state and inputs."""
        root = {
            K.OBSERVATION: self.env.reset_tensors(seed),
            K.IS_INIT: torch.ones(self.B, 1, dtype=torch.bool, device=self.env.device),
        }
        for k, s in {**self.state_specs, **self.input_specs}.items():
            root[k] = s.zeros(self.B, device=self.env.device)
        return root

    # ---- collection ----
    @torch.no_grad()
    def collect(self) -> TensorDict:
        """One rollout [T, B] (eval + explore + sequential + no grad)."""
        was_training = self.policy.training
        self.policy.eval()
        try:
            with recurrent_mode("sequential"):
                step = self._step_tensordict if self.use_tensordict else self._step_tensors
                for t in range(self.T):
                    step(t)
                if self.has_critic:
                    self._fill_next_values()
        finally:
            self.policy.train(was_training)
        self.frames += self.T * self.B
        return self.rollout

    def _step_tensors(self, t: int) -> None:
        L, root = self._leaves, self._root
        state = {k: root[k] for k in self.state_specs}
        inputs = {k: root[k] for k in (K.OBSERVATION, *self.input_specs)}
        out, nxt_state = self.policy.act(inputs, state, root[K.IS_INIT])
        for k, v in root.items():
            L[k][t] = v
        for k, v in out.items():
            L[k][t] = v
        r = self.env.step_tensors(out[K.ACTION])
        for k, v in zip(
            _NEXT_ENV_KEYS,
            (
                r.next_observation,
                r.reward,
                r.terminated,
                r.truncated,
                r.done,
                r.episode_return,
                r.episode_length,
            ),
            strict=True,
        ):
            L[(K.NEXT, k)][t] = v
        for k, v in nxt_state.items():
            L[K.nxt(k)][t] = v
        if self.has_critic and r.truncated.any():
            self._store_truncation_value(t, r, out, nxt_state)
        self._root = self._next_root(r.observation, r.done, out[K.ACTION], r.reward, nxt_state)

    def _step_tensordict(self, t: int) -> None:
        td = TensorDict(dict(self._root), [self.B], device=self.env.device)
        td = self.policy(td)
        self.env.step(td)
        self.rollout[t].update_(td)
        r = td[K.NEXT]
        nxt_state = {k: r[k] for k in self.state_specs}
        if self.has_critic and r[K.TRUNCATED].any():
            out = {K.ACTION: td[K.ACTION]}
            self._store_truncation_value(t, self.env.last_step, out, nxt_state)
        self._root = self._next_root(
            self.env.last_step.observation, r[K.DONE], td[K.ACTION], r[K.REWARD], nxt_state
        )

    def _next_root(self, obs, done, action, reward, nxt_state) -> dict[str, torch.Tensor]:
        """Step t+1's inputs: state and derived inputs carried over, zeroed where episodes end."""
        root = {K.OBSERVATION: obs, K.IS_INIT: done}
        carried = {**nxt_state, K.PREV_ACTION: action, K.PREV_REWARD: reward}
        any_done = bool(done.any())
        for k in (*self.state_specs, *self.input_specs):
            v = carried[k]
            root[k] = v.masked_fill(done.view(-1, *[1] * (v.dim() - 1)), 0) if any_done else v
        return root

    def _store_truncation_value(self, t, r, out, nxt_state) -> None:
        """V(true final observation, state after the step) for the truncated rows."""
        inputs = {
            K.OBSERVATION: r.next_observation,
            K.PREV_ACTION: out[K.ACTION],
            K.PREV_REWARD: r.reward,
        }
        not_init = torch.zeros_like(r.truncated)
        value = self.policy.state_value(inputs, nxt_state, not_init)
        slot = self._leaves[(K.NEXT, K.STATE_VALUE)][t]
        slot.copy_(torch.where(r.truncated, value.to(slot.device), slot))

    def _fill_next_values(self) -> None:
        """("next", "state_value") for every step: value[t+1], the truncation values kept, and
        one critic call for the step after the last."""
        L, root = self._leaves, self._root
        inputs = {k: root[k] for k in (K.OBSERVATION, *self.input_specs)}
        last = self.policy.state_value(
            inputs, {k: root[k] for k in self.state_specs}, root[K.IS_INIT]
        )
        following = torch.cat([L[K.STATE_VALUE][1:], last.unsqueeze(0).to(self.storing_device)])
        nv = L[(K.NEXT, K.STATE_VALUE)]
        nv.copy_(torch.where(L[(K.NEXT, K.TRUNCATED)], nv, following))

    def __iter__(self):
        while True:
            yield self.collect()

    def close(self) -> None:
        self.env.close()
