"""The policy: inputs -> torso (MLP, or encoder -> memory -> MLP) -> heads.

One step, :meth:`ActorCritic.step` (inputs and states -> action, distribution parameters, value
and next states, for [B] envs), is the step of every caller: the collector's hot path,
``load_policy`` (:mod:`rltool.deploy.inference`) and the exported module
(:mod:`rltool.deploy.export`, which traces it with ``export=True``). ``forward(td)`` is the
TensorDict path: an adapter over the same step in sequential mode, a [T, B] rollout in temporal.
``evaluate(td)`` scores stored actions over a [T, B] rollout for the losses.
"""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torch import nn

from rltool import keys as K
from rltool.config import PolicyConfig
from rltool.errors import ConfigError
from rltool.modules.encoders import ObsEncoder
from rltool.modules.heads import (
    CategoricalHead,
    GaussianHead,
    MultiCategoricalHead,
    QHead,
    SquashedGaussianHead,
    TwinQHead,
    check_squashable,
    epsilon_greedy,
    mask_logits,
    value_head,
)
from rltool.modules.memory import run_group
from rltool.modules.mlp import mlp, out_features
from rltool.modules.registry import build_memory
from rltool.specs import EnvSpecs, Spec

INPUT_KEYS = {
    "observation": K.OBSERVATION,
    "prev_action": K.PREV_ACTION,
    "prev_reward": K.PREV_REWARD,
}


class Torso(nn.Module):
    """x [.., F] -> features [.., out]: an MLP, or encoder MLP -> memory -> MLP.

    The memory is the one of ``cfg.kind`` (the registry of ``rltool/memories.py``, built by
    ``rltool/modules/registry.py``), or a module built by ``memory(input_size, state_prefix)``.
    What the torso needs of it: ``state_keys`` and ``state_specs`` (any names, shapes, dtypes),
    ``hidden_size`` (width of its output), ``mode`` ("sequential" | "temporal", how
    ``forward(td)`` reads a TensorDict) and ``run(x, states, is_init, time_dim, need_states)`` as
    :meth:`rltool.modules.memory.Memory.run`."""

    def __init__(
        self, in_features: int, cfg: PolicyConfig, state_prefix="", memory=None, post=True
    ):
        super().__init__()
        hidden = cfg.hidden_sizes if post else []  # post=False: a head's own MLP follows
        if cfg.kind == "mlp" and memory is None:
            self.pre, self.rnn = mlp(in_features, hidden, cfg.activation), None
            self.post = nn.Identity()
            self.out_features = out_features(in_features, hidden)
            return
        self.pre = mlp(in_features, cfg.encoder_sizes, cfg.activation)
        enc = out_features(in_features, cfg.encoder_sizes)
        build = memory or (lambda size, prefix: build_memory(cfg, size, prefix))
        self.rnn = build(enc, state_prefix)
        self.post = mlp(self.rnn.hidden_size, hidden, cfg.activation)
        self.out_features = out_features(self.rnn.hidden_size, hidden)

    @property
    def state_specs(self) -> dict[str, Spec]:
        return self.rnn.state_specs if self.rnn is not None else {}

    def forward(
        self, x, state: dict, is_init, time_dim: bool, need_states: bool = True, export=False
    ):
        """Returns features and the next state (a dict; empty for an MLP). ``export``: one step
        through the memory's export-safe ``export_step`` where it has one (FFM: no complex
        tensors), else its ``run``."""
        x = self.pre(x) if len(self.pre) else x  # an empty encoder costs a module call per step
        rnn = self.rnn  # (each submodule lookup is a Python call: once per step, not thrice)
        if rnn is None:
            return x, {}
        keys = rnn.state_keys
        states = [state[k] for k in keys]
        if export and hasattr(rnn, "export_step"):
            y, nxt = rnn.export_step(x, states, is_init.reshape(-1))
        else:
            y, nxt = rnn.run(x, states, is_init, time_dim, need_states)
        nxt = dict(zip(keys, nxt, strict=True)) if nxt is not None else {}
        return self.post(y), nxt

    @staticmethod
    def run_many(torsos, x, state: dict, is_init, need_states: bool = True):
        """Torsos over the same [T, *B] sequence: [(features, next state)], as each one's
        ``forward(..., time_dim=True)``; their memories run as one where they join
        (:func:`rltool.modules.memory.run_group`)."""
        if any(t.rnn is None for t in torsos):
            return [t(x, state, is_init, True, need_states) for t in torsos]
        xs = [t.pre(x) if len(t.pre) else x for t in torsos]
        states = [[state[k] for k in t.rnn.state_keys] for t in torsos]
        runs = run_group([t.rnn for t in torsos], xs, states, is_init, need_states)
        return [
            (t.post(y), dict(zip(t.rnn.state_keys, nxt, strict=True)) if nxt is not None else {})
            for t, (y, nxt) in zip(torsos, runs, strict=True)
        ]


class ActorCritic(nn.Module):
    """Actor (categorical or Gaussian) and critic, with separate or shared torsos; or, with
    ``heads=("q",)``, a Q-network (``action_value``) acting epsilon-greedily (``epsilon``); or,
    with ``heads=("actor", "qvalue")``, SAC's squashed Gaussian actor, twin Q(s, a) critics
    (``qvalue``) on a torso of their own and the entropy coefficient's ``log_alpha``.
    ``memory``: an optional factory of a memory module (see :class:`Torso`) in place of the one
    of ``cfg.kind``."""

    def __init__(self, specs: EnvSpecs, cfg: PolicyConfig, heads=("actor", "critic"), memory=None):
        super().__init__()
        self.specs, self.explore, self.epsilon = specs, True, 0.0
        self.is_q, self.is_sac = "q" in heads, "qvalue" in heads
        if self.is_sac:
            check_squashable(specs.action)
        if self.is_q and specs.action.multi_discrete:
            raise ConfigError(
                f"loss=dqn cannot act in this env's MultiDiscrete{list(specs.action.nvec)} "
                "actions (one Q-value per joint action is not built): use loss=ppo"
            )
        if self.is_q and not specs.action.discrete:
            raise ConfigError(
                "loss=dqn needs a discrete action space, but this env's actions are continuous "
                f"(shape {tuple(specs.action.shape)}): use loss=ppo, or a discrete-action env"
            )
        self.in_keys = [INPUT_KEYS[name] for name in cfg.inputs]
        act = specs.action
        # the env's action mask (env.action_mask): an input read each step, never encoded; it
        # acts on the heads only, so every torso (MLP or memory) takes it the same way
        self.mask_key = K.ACTION_MASK if specs.action_mask is not None else None
        if self.mask_key is not None:
            if not (act.discrete or act.multi_discrete):
                raise ConfigError(
                    "action masks need Discrete or MultiDiscrete actions: set env.action_mask=none"
                )
            self.in_keys.append(self.mask_key)
        self.action_features = act.n if act.discrete else int(torch.Size(act.shape).numel())
        if act.multi_discrete:
            self.action_features = sum(act.nvec)
        self.encoder = ObsEncoder(specs.observation, cfg)
        in_dim = self.encoder.out_features
        in_dim += self.action_features * (K.PREV_ACTION in self.in_keys)
        in_dim += K.PREV_REWARD in self.in_keys
        self.actor_torso = Torso(in_dim, cfg, memory=memory)
        self.has_critic = "critic" in heads
        if self.has_critic:
            self.critic_torso = (
                self.actor_torso
                if cfg.shared_torso
                else Torso(in_dim, cfg, state_prefix="critic_", memory=memory)
            )
            self.critic = value_head(self.critic_torso.out_features)
        if self.is_sac:  # the action enters at the Q heads: their MLP follows the memory
            self.critic_torso = Torso(in_dim, cfg, "critic_", memory, post=False)
            width = self.critic_torso.out_features
            self.qvalue = TwinQHead(width, self.action_features, cfg.hidden_sizes, cfg.activation)
            self.log_alpha = nn.Parameter(torch.zeros(()))  # set by the loss (loss.alpha_init)
        f = self.actor_torso.out_features
        if self.is_q:
            self.dist = QHead(f, act.n, cfg.dueling)
        elif self.is_sac:
            self.dist = SquashedGaussianHead(f, self.action_features, act.low, act.high)
        elif act.discrete:
            self.dist = CategoricalHead(f, act.n)
        elif act.multi_discrete:
            self.dist = MultiCategoricalHead(f, act.nvec)
        else:
            self.dist = GaussianHead(f, act.shape[-1], cfg.init_log_std)

    @property
    def torsos(self) -> list[Torso]:
        two = self.has_critic or self.is_sac
        separate = two and self.critic_torso is not self.actor_torso
        return [self.actor_torso, self.critic_torso] if separate else [self.actor_torso]

    @property
    def state_specs(self) -> dict[str, Spec]:
        """The recurrent state this policy carries, per env (empty for an MLP)."""
        return {k: s for t in self.torsos for k, s in t.state_specs.items()}

    @property
    def export_state_specs(self) -> dict[str, Spec]:
        """The state the exported step carries: SAC's actor's alone (its critics act in no
        step of a deployed policy); every torso's otherwise."""
        return self.actor_torso.state_specs if self.is_sac else self.state_specs

    @property
    def input_specs(self) -> dict[str, Spec]:
        """Inputs besides the observation that the collector derives (zero at episode starts)."""
        out = {}
        if K.PREV_ACTION in self.in_keys:
            out[K.PREV_ACTION] = self.specs.action
        if K.PREV_REWARD in self.in_keys:
            out[K.PREV_REWARD] = self.specs.reward
        return out

    def _prev_action(self, a: torch.Tensor, dtype) -> torch.Tensor:
        act = self.specs.action
        if act.discrete:
            return nn.functional.one_hot(a.long(), self.action_features).to(dtype)
        if act.multi_discrete:
            return torch.cat(
                [nn.functional.one_hot(a[..., i].long(), n) for i, n in enumerate(act.nvec)], -1
            ).to(dtype)
        return a.to(dtype)

    def encode(self, inputs: dict) -> torch.Tensor:
        """The observation's features (per entry, concatenated) and the previous inputs."""
        enc = self.encoder
        # a flat vector observation is only flattened: no module call per step
        x = enc.flatten(inputs[K.OBSERVATION]) if enc.plain else enc(inputs[K.OBSERVATION])
        parts = [x]
        if K.PREV_ACTION in self.in_keys:
            parts.append(self._prev_action(inputs[K.PREV_ACTION], x.dtype))
        if K.PREV_REWARD in self.in_keys:
            parts.append(inputs[K.PREV_REWARD].to(x.dtype))
        return torch.cat(parts, -1) if len(parts) > 1 else parts[0]

    def _heads(self, inputs, state, is_init, time_dim, need_states, export=False):
        x = self.encode(inputs)
        torsos = self.torsos if not (export and self.is_sac) else [self.actor_torso]
        if time_dim and len(torsos) > 1:  # a sequence: the two memories may share one loop
            (feat, nxt), (cfeat, cnxt) = Torso.run_many(torsos, x, state, is_init, need_states)
        else:
            feat, nxt = self.actor_torso(x, state, is_init, time_dim, need_states, export)
            cfeat, cnxt = feat, {}
            if len(torsos) > 1:
                cfeat, cnxt = self.critic_torso(x, state, is_init, time_dim, need_states, export)
        params, out = self.dist(feat), {}
        mask = self._mask(inputs)
        if mask is not None and not self.is_q:  # Q-values stay raw; masked in _choose
            params[K.LOGITS] = mask_logits(params[K.LOGITS], mask)
        if self.has_critic:
            out[K.STATE_VALUE] = self.critic(cfeat)
        return params, out, {**nxt, **cnxt}

    def _mask(self, inputs: dict) -> torch.Tensor | None:
        """The inputs' ``action_mask`` of a masked policy (the exported step is given none)."""
        return inputs.get(self.mask_key) if self.mask_key is not None else None

    def _choose(self, params: dict, inputs: dict) -> dict[str, torch.Tensor]:
        """The action and what goes with it: ``sample_log_prob``, or ``chosen_action_value``
        [*, 1] for a Q-network (epsilon-greedy when exploring, greedy otherwise); valid actions
        only where the inputs hold an ``action_mask``."""
        mask = self._mask(inputs)
        if self.is_q:
            q = params[K.ACTION_VALUE]
            action = epsilon_greedy(q, self.epsilon if self.explore else 0.0, mask)
            return {K.ACTION: action, K.CHOSEN_ACTION_VALUE: q.gather(-1, action.unsqueeze(-1))}
        action = self.dist.sample(params, self.explore, mask is not None)
        return {K.ACTION: action, K.SAMPLE_LOG_PROB: self.dist.log_prob(params, action)}

    def step(self, inputs: dict, state: dict, is_init: torch.Tensor, export: bool = False):
        """The policy's one step, for a [B] batch (every caller's: see the module docstring).

        Args:
            inputs: ``observation`` [B, ...] (a nested one: a TensorDict or a dict of its entries),
                ``prev_action`` / ``prev_reward`` where ``in_keys`` has them, ``action_mask``
                [B, n] bool for a masked policy.
            state: the recurrent state before the step, {state key: [B, ...]} (``state_specs``).
            is_init: [B, 1] bool, True at an episode's first step (the state is reset there).
            export: the exported step's contract: the previous action / reward taken as zeros
                where ``is_init`` (the collector zeroes them itself), each memory's export-safe
                step, and no mask required.

        Returns:
            (outputs, next state): outputs ``action`` [B, ...] (the policy's action: see
            :class:`rltool.envs.spaces.ActionMap` for the env's), the distribution's parameters,
            ``sample_log_prob`` and ``state_value`` [B, 1] -- or, for a Q-network,
            ``action_value`` and ``chosen_action_value``; the next state {state key: [B, ...]}.
        """
        if export:
            inputs = self.zero_inputs_where(inputs, is_init)
        params, out, nxt = self._heads(inputs, state, is_init, False, True, export)
        out.update(params)
        out.update(self._choose(params, inputs))
        return out, nxt

    act = step  # the step's earlier name, kept for code that calls ``policy.act``

    def zero_inputs_where(self, inputs: dict, is_init: torch.Tensor) -> dict:
        """``inputs`` with the previous action / reward zeroed where ``is_init`` [B, 1] (an
        episode's first step has none), as the collector stores them."""
        out = dict(inputs)
        for k in self.input_specs:
            v = inputs[k]
            out[k] = torch.where(is_init.reshape(-1, *[1] * (v.dim() - 1)), 0, v)
        return out

    def state_value(self, inputs: dict, state: dict, is_init: torch.Tensor) -> torch.Tensor:
        """V of one step [B] -> [B, 1] (the truncation bootstrap). Needs a critic."""
        x = self.encode(inputs)
        feat, _ = self.critic_torso(x, state, is_init, False, False)
        return self.critic(feat)

    def _read(self, td: TensorDictBase, temporal: bool):
        missing = [
            k for k in [*self.in_keys, *self.state_specs] if k not in td.keys(include_nested=True)
        ]
        if missing:
            raise KeyError(
                f"policy input(s) {missing} missing from the TensorDict: the collector "
                "(or the caller) must provide the recurrent state and inputs"
            )
        state = {k: td.get(k)[0] if temporal else td.get(k) for k in self.state_specs}
        return {k: td.get(k) for k in self.in_keys}, state, td.get(K.IS_INIT)

    def _temporal(self) -> bool:
        return any(t.rnn is not None and t.rnn.mode == "temporal" for t in self.torsos)

    def forward(self, td: TensorDictBase) -> TensorDictBase:
        """The TensorDict path: reads inputs, state keys, is_init; writes action, sample_log_prob,
        dist params, state_value and ("next", state keys). Batch [*B] in sequential mode,
        [T, *B] in temporal mode."""
        temporal = self._temporal()
        inputs, state, is_init = self._read(td, temporal)
        if temporal:
            params, out, nxt = self._heads(inputs, state, is_init, True, True)
            out = {**params, **out, **self._choose(params, inputs)}
        else:  # the one step (:meth:`step`), read from and written to the TensorDict
            out, nxt = self.step(inputs, state, is_init)
        for k, v in out.items():
            td.set(k, v)
        for k, v in nxt.items():
            td.set(K.nxt(k), v)
        return td

    def evaluate(self, td: TensorDictBase) -> dict[str, torch.Tensor]:
        """Scores the stored ``action`` of a [T, B] rollout (the losses' path): dist params,
        ``sample_log_prob``, ``entropy`` and ``state_value``, each [T, B, ...]."""
        inputs, state, is_init = self._read(td, temporal=True)
        params, out, _ = self._heads(inputs, state, is_init, True, False)
        out.update(params)
        out[K.SAMPLE_LOG_PROB] = self.dist.log_prob(params, td.get(K.ACTION))
        out["entropy"] = self.dist.entropy(params)
        return out

    def final_states(self, td: TensorDictBase) -> dict[str, torch.Tensor]:
        """The recurrent states after the last step of a [T, B] rollout, run from its stored
        states at t=0 (``is_init`` resets included) by every torso's memory: {state key: [B, ...]}.
        PPO's ``loss.refresh_states`` calls it without gradients, in temporal mode."""
        inputs, state, is_init = self._read(td, temporal=True)
        x = self.encode(inputs)
        runs = Torso.run_many(self.torsos, x, state, is_init)  # actor and critic: one loop
        return {k: s[-1] for _, nxt in runs for k, s in nxt.items()}

    def action_values(self, td: TensorDictBase, with_next: bool = False, need_states=False):
        """Q over a [T, B] window (the DQN loss's path): ``action_value`` [T, B, n]; with
        ``with_next`` also Q of ``("next", "observation")`` [T, B, n], each from the state after
        its step (so a truncated episode's true final observation is scored with the state it
        followed); and the states after each step ({key: [T, B, L, H]}; with ``need_states``)."""
        inputs, state, is_init = self._read(td, temporal=True)
        x = self.encode(inputs)
        feat, nxt = self.actor_torso(x, state, is_init, True, with_next or need_states)
        q = self.dist(feat)[K.ACTION_VALUE]
        if not with_next:
            return q, None, nxt
        not_init = torch.zeros_like(is_init)
        feat_next, _ = self.actor_torso(self.encode(_after(td)), nxt, not_init, False, False)
        return q, self.dist(feat_next)[K.ACTION_VALUE], nxt

    def sequence_features(self, td: TensorDictBase, torsos, need_states: bool = False):
        """``torsos`` over a [T, B] window from its stored states at t=0 (the SAC loss's path):
        [(features [T, B, F], the states after each step {key: [T, B, ...]} or {})]."""
        inputs, state, is_init = self._read(td, temporal=True)
        return Torso.run_many(torsos, self.encode(inputs), state, is_init, need_states)

    def next_features(self, td: TensorDictBase, torsos, states: dict) -> list[torch.Tensor]:
        """Each torso's features [T, B, F] of ``("next", "observation")``, one step from
        ``states`` (after each step, as :meth:`sequence_features` gives them): a truncated
        episode's true final observation is read with the state it followed."""
        x = self.encode(_after(td))
        not_init = torch.zeros_like(td.get(K.IS_INIT))
        return [t(x, states, not_init, False, False)[0] for t in torsos]


def _after(td: TensorDictBase) -> dict:
    """The inputs of the step after each step of a window: the next observation, this step's
    action and reward as the previous ones."""
    return {
        K.OBSERVATION: td.get(K.nxt(K.OBSERVATION)),
        K.PREV_ACTION: td.get(K.ACTION),
        K.PREV_REWARD: td.get(K.nxt(K.REWARD)),
    }
