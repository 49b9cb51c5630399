"""Collection throughput: rltool's Collector against a hand-written loop, in the same run.

The hand-written loop is the ceiling: gymnasium's SyncVectorEnv (SAME_STEP autoreset), the very
torch modules of the policy called on the observation tensor, and the same preallocated [T, B]
storage written in place, no TensorDict. It stores what the collector stores (root observation,
is_init, states, action, logits, log-prob, value; next observation with the true final one,
reward, flags, states, bootstrap value, episode statistics), and the script checks that both give
the same rollout from the same seeds (floats to 1e-5: the policy may step its RNN on the bare cell
functions rather than the module), so the two loops do the same work.

    PYTHONPATH=$PWD python scripts/bench_collect.py              # MLP and LSTM, 8 and 32 envs
    PYTHONPATH=$PWD python scripts/bench_collect.py --envs 8 --clock cpu

One thread (``torch.set_num_threads(1)``). Each cell is the best of ``--repeats`` timings of
``--batches`` rollouts of ``--steps`` steps, the two loops alternating (best-of damps a loaded
machine; ``--clock cpu`` counts this process's CPU time only).
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.modules import make_policy
from rltool.modules.policy import ActorCritic

ENV_ID = "CartPole-v1"


class HandLoop:
    """A bare loop over SyncVectorEnv and the policy's own modules (one-layer LSTM or MLP torsos,
    separate actor and critic, categorical head)."""

    def __init__(self, policy: ActorCritic, num_envs: int, steps: int):
        self.p, self.B, self.T = policy, num_envs, steps
        self.vec = SyncVectorEnv(
            [lambda: gym.make(ENV_ID)] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP
        )
        T, B = steps, num_envs
        n_act = policy.specs.action.n
        z = lambda *s, dtype=torch.float32: torch.zeros(T, B, *s, dtype=dtype)
        self.buf = {
            K.OBSERVATION: z(4),
            K.IS_INIT: z(1, dtype=torch.bool),
            K.ACTION: z(dtype=torch.int64),
            K.LOGITS: z(n_act),
            K.SAMPLE_LOG_PROB: z(),
            K.STATE_VALUE: z(1),
            K.nxt(K.OBSERVATION): z(4),
            K.nxt(K.REWARD): z(1),
            K.nxt(K.TERMINATED): z(1, dtype=torch.bool),
            K.nxt(K.TRUNCATED): z(1, dtype=torch.bool),
            K.nxt(K.DONE): z(1, dtype=torch.bool),
            K.nxt(K.EPISODE_RETURN): z(1),
            K.nxt(K.EPISODE_LENGTH): z(1, dtype=torch.int64),
            K.nxt(K.STATE_VALUE): z(1),
        }
        self.rnn = policy.actor_torso.rnn is not None
        if self.rnn:
            self.lstm_a = policy.actor_torso.rnn.layers[0]
            self.lstm_c = policy.critic_torso.rnn.layers[0]
            self.state_keys = [*policy.state_specs]
            H = self.lstm_a.hidden_size
            for k in self.state_keys:
                self.buf[k] = z(1, H)
                self.buf[K.nxt(k)] = z(1, H)

    def reset(self, seed: int) -> None:
        obs, _ = self.vec.reset(seed=seed)
        self.obs = torch.from_numpy(obs)
        self.is_init = torch.ones(self.B, 1, dtype=torch.bool)
        self.ep_ret, self.ep_len = np.zeros(self.B), np.zeros(self.B, dtype=np.int64)
        H = self.lstm_a.hidden_size if self.rnn else 0
        self.state = [torch.zeros(1, self.B, H) for _ in range(4)]  # h_a, c_a, h_c, c_c

    def _heads(self, obs, state):
        p = self.p
        if not self.rnn:
            feat, cfeat, nxt = p.actor_torso.pre(obs), p.critic_torso.pre(obs), state
        else:
            ya, (ha, ca) = self.lstm_a(obs.unsqueeze(0), (state[0], state[1]))
            yc, (hc, cc) = self.lstm_c(obs.unsqueeze(0), (state[2], state[3]))
            feat, cfeat = p.actor_torso.post(ya[0]), p.critic_torso.post(yc[0])
            nxt = [ha, ca, hc, cc]
        return p.dist.linear(feat), p.critic(cfeat), nxt

    @torch.no_grad()
    def collect(self) -> dict[str, torch.Tensor]:
        b = self.buf
        for t in range(self.T):
            b[K.OBSERVATION][t] = self.obs
            b[K.IS_INIT][t] = self.is_init
            logits, value, nxt = self._heads(self.obs, self.state)
            action = self.p.dist.sample({K.LOGITS: logits}, explore=True)  # the same draw
            logp = torch.log_softmax(logits, -1).gather(-1, action.unsqueeze(-1)).squeeze(-1)
            b[K.ACTION][t], b[K.LOGITS][t] = action, logits
            b[K.SAMPLE_LOG_PROB][t], b[K.STATE_VALUE][t] = logp, value
            if self.rnn:
                for i, k in enumerate(self.state_keys):
                    b[k][t] = self.state[i].transpose(0, 1)
                    b[K.nxt(k)][t] = nxt[i].transpose(0, 1)
            obs, rew, term, trunc, info = self.vec.step(action.numpy())
            done = term | trunc
            self.ep_ret += rew
            self.ep_len += 1
            b[K.nxt(K.EPISODE_RETURN)][t, :, 0] = torch.from_numpy(self.ep_ret)
            b[K.nxt(K.EPISODE_LENGTH)][t, :, 0] = torch.from_numpy(self.ep_len)
            self.obs = torch.from_numpy(obs)
            b[K.nxt(K.OBSERVATION)][t] = self.obs
            if done.any():
                self.ep_ret[done], self.ep_len[done] = 0.0, 0
                mask = info["_final_obs"]
                final = np.stack(info["final_obs"][mask])
                b[K.nxt(K.OBSERVATION)][t, mask] = torch.from_numpy(final)
                if trunc.any():  # V(final observation, state after the step)
                    _, v, _ = self._heads(b[K.nxt(K.OBSERVATION)][t], nxt)
                    b[K.nxt(K.STATE_VALUE)][t, trunc] = v[torch.from_numpy(trunc)]
                if self.rnn:
                    d = torch.from_numpy(done).view(1, -1, 1)
                    nxt = [s.masked_fill(d, 0.0) for s in nxt]
            b[K.nxt(K.REWARD)][t, :, 0] = torch.from_numpy(rew)
            b[K.nxt(K.TERMINATED)][t, :, 0] = torch.from_numpy(term)
            b[K.nxt(K.TRUNCATED)][t, :, 0] = torch.from_numpy(trunc)
            b[K.nxt(K.DONE)][t, :, 0] = self.is_init[:, 0] = torch.from_numpy(done)
            self.state = nxt
        _, last, _ = self._heads(self.obs, self.state)  # bootstrap value after the last step
        nv, trunc = b[K.nxt(K.STATE_VALUE)], b[K.nxt(K.TRUNCATED)]
        following = torch.cat([b[K.STATE_VALUE][1:], last.unsqueeze(0)])
        nv.copy_(torch.where(trunc, nv, following))
        return b

    def close(self) -> None:
        self.vec.close()


def build(kind: str, num_envs: int, steps: int, seed: int):
    torch.manual_seed(seed)
    env = make_env(EnvConfig(id=ENV_ID, num_envs=num_envs))
    policy = make_policy(PolicyConfig(kind=kind), env.specs)
    torch.manual_seed(seed)
    collector = Collector(env, policy, num_envs * steps, seed=seed)
    hand = HandLoop(policy, num_envs, steps)
    hand.reset(seed)
    return collector, hand


def same_rollouts(kind: str, num_envs: int, steps: int) -> bool:
    """Both loops, from the same seeds, store the same numbers (over 3 batches)."""
    collector, hand = build(kind, num_envs, steps, seed=0)
    torch.manual_seed(1)
    ours = [collector.collect().clone() for _ in range(3)]
    torch.manual_seed(1)
    theirs = [{k: v.clone() for k, v in hand.collect().items()} for _ in range(3)]
    collector.close(), hand.close()
    return all(
        torch.allclose(td.get(k), b[k], rtol=1e-5, atol=1e-6)
        if b[k].is_floating_point()
        else torch.equal(td.get(k), b[k])
        for td, b in zip(ours, theirs, strict=True)
        for k in b
    )


def fps(loop, batches: int, frames: int, clock=time.perf_counter) -> float:
    start = clock()
    for _ in range(batches):
        loop.collect()
    return batches * frames / (clock() - start)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", nargs="+", default=["mlp", "lstm"])
    ap.add_argument("--envs", nargs="+", type=int, default=[8, 32])
    ap.add_argument("--steps", type=int, default=64, help="T, steps per rollout")
    ap.add_argument("--batches", type=int, default=1, help="rollouts per timing")
    ap.add_argument("--repeats", type=int, default=30, help="alternating timings per loop")
    ap.add_argument(
        "--clock",
        choices=["wall", "cpu"],
        default="wall",
        help="wall time, or this process's CPU time (steadier on a shared machine)",
    )
    args = ap.parse_args()
    clock = time.perf_counter if args.clock == "wall" else time.process_time
    torch.set_num_threads(1)
    print(
        f"torch {torch.__version__}, gymnasium {gym.__version__}, threads 1, T={args.steps}, "
        f"{args.clock} clock, best of {args.repeats} x {args.batches} rollouts"
    )
    head = f"{'policy':<7}{'envs':>5}{'collector f/s':>15}{'hand loop f/s':>15}{'ratio':>7}  same"
    print(head)
    for kind in args.policies:
        for n in args.envs:
            same = same_rollouts(kind, n, args.steps)
            collector, hand = build(kind, n, args.steps, seed=0)
            frames = n * args.steps
            ours = theirs = 0.0
            for i in range(args.repeats):  # alternating, and in turn first (ABBA)
                for loop in (collector, hand) if i % 2 else (hand, collector):
                    f = fps(loop, args.batches, frames, clock)
                    if loop is collector:
                        ours = max(ours, f)
                    else:
                        theirs = max(theirs, f)
            collector.close(), hand.close()
            print(
                f"{kind:<7}{n:>5}{ours:>15,.0f}{theirs:>15,.0f}{ours / theirs:>7.2f}  "
                f"{'yes' if same else 'NO'}"
            )


if __name__ == "__main__":
    main()
