"""TorchRL's own recurrent PPO, the peer of rltool's ``lstm`` case in scripts/bench_ppo.py.

Runs inside its own venv (torchrl 0.14 needs tensordict < 0.15; rltool >= 0.15), so it never
imports rltool: bench_ppo.py passes every setting as one JSON object (``--settings``, built by
its ``torchrl_settings`` from the config rltool trains with) and reads back one JSON result
(``--out``): frames, train seconds (collection + updates, no evaluation) and the evaluations.

TorchRL's parts: ``LSTMModule`` (``set_recurrent_mode`` in the loss and GAE), ``ClipPPOLoss``,
``GAE``, ``Collector`` over a ``GymWrapper`` of a gymnasium ``SyncVectorEnv`` (autoreset
DISABLED, TorchRL's preferred mode: it resets the done envs itself) with ``InitTracker`` and the
LSTMs' primers. Minibatches: the [env, time] batch split by env, whole columns, as rltool's.
The env side is rltool's, in numpy: CartPole-v1 without velocities (obs_keep), observations
normalised by running statistics frozen after ``normalize_obs_frames`` and clipped, rewards
divided by the std of the discounted return (TorchRL's VecNorm scales rewards by their own std,
which maps CartPole's constant reward to 0). Evaluation: greedy (the mode) over the same episode
quotas and seeds as rltool.run.evaluation, with the training statistics frozen.

Needs torch, torchrl, tensordict and gymnasium only at run time: importing this file does not,
so the settings test runs without the venv.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time

import numpy as np


@dataclasses.dataclass(frozen=True)
class Settings:
    """One run's settings: exactly the keys bench_ppo.torchrl_settings writes."""

    env_id: str
    obs_keep: list[int] | None
    normalize_obs: bool
    normalize_obs_frames: int | None
    normalize_reward: bool
    clip_obs: float
    num_envs: int
    steps: int
    epochs: int
    num_minibatches: int
    gamma: float
    lam: float
    lr: float
    adam_eps: float
    anneal_lr: bool
    clip: float
    anneal_clip: bool
    ent: float
    anneal_ent: bool
    vf: float
    max_grad_norm: float
    normalize_advantage: bool
    refresh_states: bool
    hidden_size: int
    num_layers: int
    encoder_sizes: list[int]
    hidden_sizes: list[int]
    activation: str
    shared_torso: bool
    eval_episodes: int
    final_episodes: int
    eval_seed_offset: int
    seed: int
    frames: int
    eval_every: int
    num_threads: int

    def __post_init__(self):
        if self.shared_torso:
            raise ValueError("the TorchRL peer builds separate actor and critic torsos only")
        if self.refresh_states:
            raise ValueError("TorchRL's PPO keeps the collected states: no loss.refresh_states")
        if self.activation not in ("relu", "tanh"):
            raise ValueError(f"activation {self.activation!r}: relu or tanh")
        if self.num_envs % self.num_minibatches:
            raise ValueError("minibatches are whole env columns: num_envs % num_minibatches")


class RunningMeanStd:
    """rltool.envs.normalize.RunningMeanStd: Chan et al.'s parallel update, float64."""

    def __init__(self, shape=()):
        self.mean, self.var, self.count = np.zeros(shape), np.ones(shape), 1e-4

    def update(self, x):
        x = np.asarray(x, dtype=np.float64)
        n, b_mean = x.shape[0], x.mean(0)
        b_var, delta, total = x.var(0), b_mean - self.mean, self.count + x.shape[0]
        self.mean = self.mean + delta * n / total
        m2 = self.var * self.count + b_var * n + delta**2 * self.count * n / total
        self.var, self.count = m2 / total, total


def make_env_wrapper():
    """The env side of rltool's VectorEnv as a gymnasium VectorWrapper (defined here so that
    importing this file needs no gymnasium)."""
    import gymnasium as gym

    class Normalized(gym.vector.VectorWrapper):
        """obs_keep, obs normalisation (frozen at max_count, clipped) and reward scaling."""

        def __init__(self, env, s: Settings, obs_rms=None, training=True):
            super().__init__(env)
            self.keep, self.s, self.training = s.obs_keep, s, training
            self.autoreset_mode = env.autoreset_mode  # TorchRL reads it off the outer env
            space = env.single_observation_space
            if self.keep is not None:
                space = gym.spaces.Box(space.low[self.keep], space.high[self.keep])
            self.single_observation_space = space
            self.observation_space = gym.vector.utils.batch_space(space, env.num_envs)
            self.obs_rms = obs_rms or RunningMeanStd(space.shape)
            self.ret_rms, self.ret = RunningMeanStd(), np.zeros(env.num_envs)

        def _obs(self, obs, update_rows=None):
            obs = obs[:, self.keep] if self.keep is not None else obs
            if not self.s.normalize_obs:
                return obs.astype(np.float32)
            limit = self.s.normalize_obs_frames
            if self.training and (limit is None or self.obs_rms.count < limit):
                self.obs_rms.update(obs if update_rows is None else obs[update_rows])
            out = (obs - self.obs_rms.mean) / np.sqrt(self.obs_rms.var + 1e-8)
            return np.clip(out, -self.s.clip_obs, self.s.clip_obs).astype(np.float32)

        def reset(self, *, seed=None, options=None):
            obs, info = self.env.reset(seed=seed, options=options)
            rows = (options or {}).get("reset_mask")
            self.ret[rows if rows is not None else slice(None)] = 0.0
            return self._obs(obs, rows), info

        def step(self, action):
            obs, rew, term, trunc, info = self.env.step(action)
            if self.s.normalize_reward and self.training:  # an eval env's rewards stay raw
                self.ret = self.ret * self.s.gamma + rew
                self.ret_rms.update(self.ret)
                self.ret[term | trunc] = 0.0
                rew = np.clip(rew / np.sqrt(self.ret_rms.var + 1e-8), -10.0, 10.0)
            return self._obs(obs), rew.astype(np.float32), term, trunc, info

    return Normalized


def vector_env(s: Settings, n: int, **kw):
    import gymnasium as gym

    fns = [lambda: gym.make(s.env_id) for _ in range(n)]
    vec = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode.DISABLED)
    return make_env_wrapper()(vec, s, **kw)


def mlp(sizes, in_features, activation, out=None, out_gain=1.0):
    """Linear layers with rltool's init: orthogonal, gain sqrt(2) hidden, ``out_gain`` last."""
    from torch import nn

    act = {"relu": nn.ReLU, "tanh": nn.Tanh}[activation]
    layers = []
    for size in sizes:
        layers += [nn.Linear(in_features, size), act()]
        in_features = size
    if out is not None:
        layers.append(nn.Linear(in_features, out))
    for layer in layers:
        if isinstance(layer, nn.Linear):
            last = layer is layers[-1] and out is not None
            nn.init.orthogonal_(layer.weight, out_gain if last else math.sqrt(2))
            nn.init.zeros_(layer.bias)
    return nn.Sequential(*layers)


def torso(s: Settings, obs_dim, prefix, out_key, out, out_gain):
    """encoder MLP -> LSTMModule -> MLP -> ``out`` units at ``out_key`` (rltool's Torso + head)."""
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.modules import LSTMModule

    enc = s.encoder_sizes
    lstm = LSTMModule(
        input_size=enc[-1] if enc else obs_dim,
        hidden_size=s.hidden_size,
        num_layers=s.num_layers,
        in_keys=[f"{prefix}enc", f"{prefix}h", f"{prefix}c"],
        out_keys=[f"{prefix}mem", ("next", f"{prefix}h"), ("next", f"{prefix}c")],
    )
    pre = TensorDictModule(mlp(enc, obs_dim, s.activation), ["observation"], [f"{prefix}enc"])
    post = mlp(s.hidden_sizes, s.hidden_size, s.activation, out, out_gain)
    head = TensorDictModule(post, [f"{prefix}mem"], [out_key])
    return TensorDictSequential(pre, lstm, head), lstm


def build(s: Settings, obs_dim, n_actions):
    """(actor, critic, their LSTMModules): a categorical actor and a value network."""
    from torch.distributions import Categorical
    from torchrl.modules import ProbabilisticActor

    actor_net, a_lstm = torso(s, obs_dim, "pi_", "logits", n_actions, 0.01)
    actor = ProbabilisticActor(
        actor_net, in_keys=["logits"], distribution_class=Categorical, return_log_prob=True
    )
    critic, c_lstm = torso(s, obs_dim, "vf_", "state_value", 1, 1.0)
    return actor, critic, (a_lstm, c_lstm)


def make_train_env(s: Settings, lstms):
    """TorchRL's env over the wrapped vector env: InitTracker (is_init) and the LSTMs' primers."""
    from torchrl.envs import Compose, GymWrapper, InitTracker, TransformedEnv

    vec = vector_env(s, s.num_envs)
    base = GymWrapper(vec, categorical_action_encoding=True)
    env = TransformedEnv(base, Compose(InitTracker(), *(m.make_tensordict_primer() for m in lstms)))
    return env, vec


@dataclasses.dataclass
class Evaluator:
    """rltool.run.evaluation's protocol: env i of the n = ``eval_episodes`` envs plays
    (episodes + i) // n episodes, the first from reset(seed + i); greedy actions (the mode); the
    training statistics, frozen; raw rewards."""

    s: Settings
    actor: object
    obs_rms: RunningMeanStd

    def __call__(self, episodes: int) -> float:
        import torch
        from tensordict import TensorDict
        from torchrl.envs.utils import ExplorationType, set_exploration_type

        n = self.s.eval_episodes
        env = vector_env(self.s, n, obs_rms=self.obs_rms, training=False)
        quota = np.array([(episodes + i) // n for i in range(n)])
        returns, got, ret = [], np.zeros(n, int), np.zeros(n)
        obs, _ = env.reset(seed=self.s.seed + self.s.eval_seed_offset)
        shape = (n, self.s.num_layers, self.s.hidden_size)
        state = {k: torch.zeros(shape) for k in ("pi_h", "pi_c")}
        is_init = torch.ones(n, 1, dtype=torch.bool)
        with torch.no_grad(), set_exploration_type(ExplorationType.DETERMINISTIC):
            while (got < quota).any():
                td = TensorDict({"observation": torch.from_numpy(obs), "is_init": is_init})
                td = self.actor(td.update(state).auto_batch_size_(1))
                state = {k: td["next", k] for k in state}
                obs, rew, term, trunc, _ = env.step(td["action"].numpy())
                ret, done = ret + rew, term | trunc
                for i in np.flatnonzero(done & (got < quota)):
                    returns.append(ret[i])
                    got[i] += 1
                ret[done] = 0.0
                if done.any():
                    obs, _ = env.reset(options={"reset_mask": done})
                is_init = torch.from_numpy(done)[:, None]
        env.close()
        return float(np.mean(returns))


def train(s: Settings) -> dict:
    """Trains, evaluating every ``eval_every`` frames; returns the result bench_ppo.py reads."""
    import torch
    from tensordict.nn import TensorDictSequential
    from torchrl.collectors import Collector
    from torchrl.modules import set_recurrent_mode
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.set_num_threads(s.num_threads)
    torch.manual_seed(s.seed)
    probe = vector_env(s, 1)
    obs_dim, n_actions = probe.single_observation_space.shape[0], probe.single_action_space.n
    probe.close()
    actor, critic, lstms = build(s, obs_dim, n_actions)
    env, vec = make_train_env(s, lstms)
    env.set_seed(s.seed)
    # the critic runs while collecting too (as rltool's policy does), so its LSTM's states are
    # in the batch for the loss's recurrent pass
    collector = Collector(
        env,
        TensorDictSequential(actor, critic),
        frames_per_batch=s.num_envs * s.steps,
        total_frames=-1,
    )
    # vmap cannot run the LSTM's data-dependent split of rows at is_init: TorchRL's switch
    gae = GAE(gamma=s.gamma, lmbda=s.lam, value_network=critic, deactivate_vmap=True)
    loss_fn = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=s.clip,
        entropy_coeff=s.ent,
        critic_coeff=0.5 * s.vf,
        loss_critic_type="l2",
        normalize_advantage=s.normalize_advantage,
    )  # rltool's value loss is vf * 0.5 * (V - target)^2; TorchRL's l2 has no 0.5
    params = list(loss_fn.parameters())
    optim = torch.optim.Adam(params, lr=s.lr, eps=s.adam_eps)
    evaluate = Evaluator(s, actor, vec.obs_rms)
    frames, collect_s, update_s, next_eval, evals = 0, 0.0, 0.0, s.eval_every, []
    batches = iter(collector)
    while frames < s.frames:
        t0 = time.perf_counter()
        # [env, time]; the values GAE recomputes go: its root / next stack needs the same keys
        data = next(batches).exclude("state_value")
        t1 = time.perf_counter()
        frames += data.numel()
        progress = min(1.0, frames / s.frames)  # rltool's schedule: after this batch's frames
        for group in optim.param_groups:
            group["lr"] = s.lr * (1 - progress if s.anneal_lr else 1)
        loss_fn.clip_epsilon.fill_(s.clip * (1 - progress if s.anneal_clip else 1))
        loss_fn.entropy_coeff.fill_(s.ent * (1 - progress if s.anneal_ent else 1))
        with set_recurrent_mode(True):
            with torch.no_grad():
                gae(data)
            for _ in range(s.epochs):
                for mb in data.chunk(s.num_minibatches, dim=0):  # whole env columns
                    out = loss_fn(mb)
                    loss = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                    optim.zero_grad(set_to_none=True)
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(params, s.max_grad_norm)
                    optim.step()
        collect_s, update_s = collect_s + t1 - t0, update_s + time.perf_counter() - t1
        final = frames >= s.frames
        if frames >= next_eval or final:
            evals.append((frames, evaluate(s.final_episodes if final else s.eval_episodes)))
            next_eval += s.eval_every
    collector.shutdown()
    train_s = collect_s + update_s
    return {"frames": frames, "train_s": train_s, "collect_s": collect_s, "evals": evals}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", required=True, help="the run's settings, one JSON object")
    p.add_argument("--out", required=True, help="where to write the JSON result")
    a = p.parse_args()
    result = train(Settings(**json.loads(a.settings)))
    with open(a.out, "w") as f:
        json.dump(result, f)
    share = result["collect_s"] / result["train_s"]
    print(
        f"torchrl: {result['frames'] / result['train_s']:,.0f} frames/s ({share:.0%} of it "
        f"collecting), final eval {result['evals'][-1][1]:.1f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
