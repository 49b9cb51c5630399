"""The collector: drives env and policy, returns rollouts as TensorDicts of batch [T, B].

The rollout is preallocated once from the env's specs, the policy's outputs and the policy's state
specs, and written in place. The per-step hot path calls the policy's one step, ``policy.step``
(:meth:`rltool.modules.policy.ActorCritic.step`); the TensorDict path (``use_tensordict=True``)
builds a TensorDict per step and calls ``policy(td)``, an adapter over the same step. Both give
identical rollouts (tested).

Recurrent state: the state *before* step t is stored at ``[t]``, the state after it under
``("next", key)``. Where an episode starts (``is_init``) the stored state is zeros, so a replay from
stored states is exact. The state is carried across batches.

Devices (see :mod:`rltool.collectors.devices`): the policy runs on the policy's device, the env
on the env's; the collector moves each step's data between them (non-blocking where CUDA is on one
side, synchronised before the CPU reads it) and writes the rollout on the storing device. Where
all three are the same, the hot path makes no device move at all.

Values: with a critic, ``("next", "state_value")`` is the bootstrap value of the step's next
observation: the value at t+1 inside the rollout, a value of the true final observation (with the
state after the step) where an episode was truncated, and one extra critic call after the last step.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict

from rltool import keys as K
from rltool.collectors.devices import module_device, non_blocking, resolve_devices, synchronize
from rltool.data.sizes import available_on, check_fits, tensor_bytes
from rltool.envs.vector import VectorEnv
from rltool.modules.recurrent import recurrent_mode
from rltool.specs import Spec

# the StepResult fields after ``observation``, in order, and where they are stored
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
        device=None,
        env_device=None,
        policy_device=None,
        storing_device=None,
        bootstrap_values: bool | None = None,
    ):
        if frames_per_batch % env.num_envs:
            raise ValueError(
                f"frames_per_batch={frames_per_batch} is not a multiple of num_envs={env.num_envs}"
            )
        devices = resolve_devices(device, env_device, policy_device, storing_device)
        if devices.env is not None:
            env.to(devices.env)
        if devices.policy is not None:
            policy.to(devices.policy)
        self.env, self.policy, self.use_tensordict = env, policy, use_tensordict
        self.act = policy.step  # the one step (compile=true: compiled, rltool/run/compile.py)
        self.T, self.B = frames_per_batch // env.num_envs, env.num_envs
        self.env_device, self.policy_device = env.device, module_device(policy)
        self.storing_device = devices.storing or self.env_device
        self._cross = self.env_device != self.policy_device  # env <-> policy moves per step
        self._nb = non_blocking(self.env_device, self.policy_device)
        self._nb_env = non_blocking(self.env_device, self.storing_device)
        self._nb_pol = non_blocking(self.policy_device, self.storing_device)
        self.state_specs: dict[str, Spec] = dict(policy.state_specs)
        self.input_specs: dict[str, Spec] = dict(policy.input_specs)
        # the env's action mask [n] bool (None: none): stored at each step as its observation is,
        # and under "next" (the mask of the step's next observation, for DQN's target)
        self.mask_spec: Spec | None = env.specs.action_mask
        critic = getattr(policy, "has_critic", False)
        self.has_critic = critic if bootstrap_values is None else bootstrap_values and critic
        out = self._output_specs()
        self._check_size(out)
        self.rollout = self._allocate(out)
        self._leaves = {
            k: self.rollout.get(k) for k in self.rollout.keys(include_nested=True, leaves_only=True)
        }
        for k in (K.OBSERVATION, K.nxt(K.OBSERVATION)):  # a nested observation: its TensorDict
            self._leaves[k] = self.rollout.get(k)
        self._slots = [self._views(t) for t in range(self.T)]
        self.frames = 0
        self._initial_root(seed)

    @property
    def devices(self) -> dict[str, str]:
        """The resolved devices, as strings (printed and recorded by ``rltool train``)."""
        return {
            "env": str(self.env_device),
            "policy": str(self.policy_device),
            "storing": str(self.storing_device),
        }

    # ---- buffers ----
    def _output_specs(self) -> dict[str, torch.Tensor]:
        """Shapes of what the policy writes, from one call on the first observation."""
        dev = self.policy_device
        inputs = {
            K.OBSERVATION: self.env.specs.observation.zeros(self.B, device=dev),
            **{k: s.zeros(self.B, device=dev) for k, s in self.input_specs.items()},
        }
        if self.mask_spec is not None:
            inputs[K.ACTION_MASK] = torch.ones(self.B, *self.mask_spec.shape, dtype=torch.bool)
        state = {k: s.zeros(self.B, device=dev) for k, s in self.state_specs.items()}
        is_init = torch.ones(self.B, 1, dtype=torch.bool, device=dev)
        # the probe's action draws must not move the global RNG: an evaluation builds a collector,
        # and training would otherwise depend on how often it evaluates
        with torch.no_grad(), torch.random.fork_rng(devices=[dev] if dev.type == "cuda" else []):
            out, _ = self.policy.step(inputs, state, is_init)
        return out

    def rollout_bytes(self, out: dict[str, torch.Tensor] | None = None) -> int:
        """Bytes of the [T, B] rollout: its allocation on the meta device (nothing allocated).
        ``out``: the policy's outputs for one step (probed when not given)."""
        meta = self._allocate(out or self._output_specs(), torch.device("meta"))
        return tensor_bytes(meta.values(include_nested=True, leaves_only=True))

    def _check_size(self, out: dict[str, torch.Tensor]) -> None:
        """A rollout larger than the storing device's free memory: a ConfigError, not an
        allocator crash or a machine swapping (the observations and images are most of it)."""
        need, frames = self.rollout_bytes(out), self.T * self.B
        dev = self.storing_device
        check_fits(
            f"collector.frames_per_batch={frames}",
            need,
            f"{frames} frames of {need // frames} bytes",
            "memory for its rollout" if dev.type == "cpu" else f"{dev} memory for its rollout",
            available_on(dev),
            "lower collector.frames_per_batch",
        )

    def _allocate(self, out: dict[str, torch.Tensor], device=None) -> TensorDict:
        T, B, dev = self.T, self.B, device or self.storing_device
        specs = self.env.specs
        td = TensorDict({}, [T, B], device=dev)
        td[K.OBSERVATION] = specs.observation.zeros(T, B, device=dev)
        td[K.IS_INIT] = torch.zeros(T, B, 1, dtype=torch.bool, device=dev)
        if self.mask_spec is not None:
            td[K.ACTION_MASK] = self.mask_spec.zeros(T, B, device=dev)
        self._out_keys = list(out)
        for k, v in out.items():
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
        if self.mask_spec is not None:
            nxt[K.ACTION_MASK] = self.mask_spec.zeros(T, B, device=dev)
        if self.has_critic:
            nxt[K.STATE_VALUE] = torch.zeros(T, B, 1, device=dev)
        td[K.NEXT] = nxt
        return td

    def _views(self, t: int) -> dict[str, list]:
        """Step t's slots of every leaf, made once: writing into a ready view is the cheapest
        in-place write (no indexing per step)."""
        L = self._leaves
        carried = (*self.state_specs, *self.input_specs)
        masked = self.mask_spec is not None
        return {
            "root_env": [L[K.OBSERVATION][t], L[K.IS_INIT][t]]
            + ([L[K.ACTION_MASK][t]] if masked else []),
            "next_mask": L[K.nxt(K.ACTION_MASK)][t] if masked else None,
            "root_policy": [(L[k][t], k) for k in carried],
            "out": [(L[k][t], k) for k in self._out_keys],
            "next_env": [L[K.nxt(k)][t] for k in _NEXT_ENV_KEYS],
            "next_state": [(L[K.nxt(k)][t], k) for k in self.state_specs],
        }

    def _initial_root(self, seed: int | None) -> None:
        """The first step's inputs: reset observation, is_init everywhere, zero state and inputs.

        The root is held twice: ``_env_root`` (observation, is_init, the action mask where the env
        gives one) on the env's device for storing, and the policy's inputs, state and is_init on
        the policy's device."""
        obs = self.env.reset_tensors(seed)
        is_init = torch.ones(self.B, 1, dtype=torch.bool, device=self.env_device)
        self._env_root = (obs, is_init)
        dev = self.policy_device
        self._inputs = {K.OBSERVATION: self._to_policy(obs)}
        if self.mask_spec is not None:
            self._set_mask(self.env.action_mask)
        self._inputs.update({k: s.zeros(self.B, device=dev) for k, s in self.input_specs.items()})
        self._state = {k: s.zeros(self.B, device=dev) for k, s in self.state_specs.items()}
        self._is_init = self._to_policy(is_init)

    def _set_mask(self, mask: torch.Tensor) -> None:
        """The next step's action mask [B, n], in the stored root and the policy's inputs."""
        self._env_root = (*self._env_root[:2], mask)
        self._inputs[K.ACTION_MASK] = self._to_policy(mask)

    def _to_policy(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.policy_device, non_blocking=self._nb) if self._cross else x

    @property
    def _root(self) -> dict[str, torch.Tensor]:
        """The current root as one dict on the policy's device (the TensorDict path's input)."""
        return {**self._inputs, K.IS_INIT: self._is_init, **self._state}

    # ---- collection ----
    @torch.no_grad()
    def collect(self, stop: Callable[[int], bool] | None = None) -> TensorDict:
        """One rollout [T, B] on the storing device (eval + explore + sequential + no grad);
        cut short to [n, B] after the n-th step where ``stop(n)`` is True (a slow rank of
        several, :mod:`rltool.distributed.ranks`). The next rollout continues where this one
        ended."""
        was_training = self.policy.training
        self.policy.eval()
        n = self.T
        try:
            with recurrent_mode("sequential"):
                step = self._step_tensordict if self.use_tensordict else self._step_tensors
                for t in range(self.T):
                    step(t)
                    if stop is not None and t + 1 < self.T and stop(t + 1):
                        n = t + 1
                        break
                synchronize(self.env_device, self.policy_device)  # pending async copies land
                if self.has_critic:
                    self._fill_next_values(n)
                    synchronize(self.policy_device)
        finally:
            self.policy.train(was_training)
        self.frames += n * self.B
        return self.rollout if n == self.T else self.rollout[:n]

    def _step_tensors(self, t: int) -> None:
        slots, state, nb = self._slots[t], self._state, self._nb_pol
        out, nxt_state = self.act(self._inputs, state, self._is_init)
        for dst, src in zip(slots["root_env"], self._env_root, strict=True):
            dst.copy_(src, non_blocking=self._nb_env)
        root = self._inputs if not state else {**self._inputs, **state}
        for dst, k in slots["root_policy"]:
            dst.copy_(root[k], non_blocking=nb)
        for dst, k in slots["out"]:
            dst.copy_(out[k], non_blocking=nb)
        action = out[K.ACTION]
        # the env reads the action on the CPU at once: a blocking copy needs no synchronise
        r = self.env.step_tensors(action.to(self.env_device) if self._cross else action)
        for dst, src in zip(slots["next_env"], r[1:], strict=True):
            dst.copy_(src, non_blocking=self._nb_env)
        if slots["next_mask"] is not None:
            slots["next_mask"].copy_(self.env.next_action_mask, non_blocking=self._nb_env)
        for dst, k in slots["next_state"]:
            dst.copy_(nxt_state[k], non_blocking=nb)
        self._advance(t, r, action, nxt_state)

    def _step_tensordict(self, t: int) -> None:
        td = TensorDict(self._root, [self.B], device=self.policy_device)
        td = self.policy(td)
        self.env.step(td)
        self.rollout[t].update_(td)
        nxt_state = {k: td.get(K.nxt(k)) for k in self.state_specs}
        self._advance(t, self.env.last_step, td.get(K.ACTION), nxt_state)

    def _advance(self, t: int, r, action, nxt_state) -> None:
        """Truncation values, then step t+1's root: the reset observation, is_init = done, the
        state and derived inputs carried over, zeroed where an episode ended."""
        any_done = bool(r.done.any())
        if any_done and self.has_critic and bool(r.truncated.any()):
            self._store_truncation_value(t, r, action, nxt_state)
        self._env_root = (r.observation, r.done)
        done = self._to_policy(r.done)
        self._inputs[K.OBSERVATION] = self._to_policy(r.observation)
        self._is_init = done
        if self.mask_spec is not None:
            self._set_mask(self.env.action_mask)
        if not self.state_specs and not self.input_specs:
            return
        carried = {**nxt_state, K.PREV_ACTION: action}
        if K.PREV_REWARD in self.input_specs:
            carried[K.PREV_REWARD] = self._to_policy(r.reward)
        for k in (*self.state_specs, *self.input_specs):
            v = carried[k]
            v = v.masked_fill(done.view(-1, *[1] * (v.dim() - 1)), 0) if any_done else v
            (self._state if k in self.state_specs else self._inputs)[k] = v

    def restart(self, mask: torch.Tensor, observation) -> None:
        """New episodes where ``mask`` [B] bool (the env was reset there outside a step, e.g. an
        evaluation episode cut at its cap): the next step's root takes ``observation`` [B, ...]
        there, ``is_init`` True, zero state and derived inputs."""
        obs, is_init = self._env_root[:2]
        obs = obs.clone()
        obs[mask] = observation[mask]
        is_init = is_init | mask.view(-1, 1)
        self._env_root = (obs, is_init)
        if self.mask_spec is not None:  # the env's masks, new where it reset
            self._set_mask(self.env.action_mask)
        self._inputs[K.OBSERVATION] = self._to_policy(obs)
        self._is_init = self._to_policy(is_init)
        rows = self._to_policy(mask)
        for k in (*self.state_specs, *self.input_specs):
            where = self._state if k in self.state_specs else self._inputs
            v = where[k]
            where[k] = v.masked_fill(rows.view(-1, *[1] * (v.dim() - 1)), 0)

    def _store_truncation_value(self, t, r, action, nxt_state) -> None:
        """V(true final observation, state after the step) for the truncated rows."""
        inputs = {
            K.OBSERVATION: self._to_policy(r.next_observation),
            K.PREV_ACTION: action,
            K.PREV_REWARD: self._to_policy(r.reward),
        }
        not_init = torch.zeros(self.B, 1, dtype=torch.bool, device=self.policy_device)
        value = self.policy.state_value(inputs, nxt_state, not_init)
        slot = self._leaves[K.nxt(K.STATE_VALUE)][t]
        trunc = r.truncated.to(slot.device)
        slot.copy_(torch.where(trunc, value.to(slot.device), slot))

    def _fill_next_values(self, n: int) -> None:
        """("next", "state_value") for the first ``n`` steps: value[t+1], the truncation values
        kept, and one critic call for the step after the last."""
        L = self._leaves
        last = self.policy.state_value(self._inputs, self._state, self._is_init)
        following = torch.cat([L[K.STATE_VALUE][1:n], last.unsqueeze(0).to(self.storing_device)])
        nv = L[K.nxt(K.STATE_VALUE)][:n]
        nv.copy_(torch.where(L[K.nxt(K.TRUNCATED)][:n], nv, following))

    # ---- checkpoints: the carried root (observation, is_init, recurrent state, prev inputs) ----
    def state_dict(self) -> dict:
        """Plain tensors and dicts (a nested observation as a dict of its entries)."""
        root = {k: v.clone() for k, v in self._root.items()}
        if isinstance(root[K.OBSERVATION], TensorDict):
            root[K.OBSERVATION] = root[K.OBSERVATION].to_dict()
        return {"root": root, "frames": self.frames}

    def load_state_dict(self, state: dict) -> None:
        root, pol, env = dict(state["root"]), self.policy_device, self.env_device
        if isinstance(root[K.OBSERVATION], dict):
            root[K.OBSERVATION] = TensorDict(root[K.OBSERVATION], batch_size=[self.B])
        self._env_root = (root[K.OBSERVATION].to(env), root[K.IS_INIT].to(env))
        self._inputs = {k: root[k].to(pol) for k in (K.OBSERVATION, *self.input_specs)}
        self._state = {k: root[k].to(pol) for k in self.state_specs}
        self._is_init = root[K.IS_INIT].to(pol)
        if self.mask_spec is not None:  # (a root saved before masks: the env's current masks)
            self._set_mask(root.get(K.ACTION_MASK, self.env.action_mask).to(env))
        self.frames = state["frames"]

    def close(self) -> None:
        self.env.close()
