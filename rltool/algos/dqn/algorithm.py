"""DQN's update: store the rollout in the replay; after warm-up, ``utd_ratio`` gradient steps on
sampled windows, each followed by its priorities and the target-network update; then epsilon for
the next rollout. A checkpoint adds the target network, update count and epsilon (``dqn``) and
the replay's folder (``buffer``)."""

from __future__ import annotations

from rltool.algos.base import Algorithm
from rltool.data import make_replay
from rltool.losses import DQNLoss, linear_schedule


class DQN(Algorithm):
    def __init__(self, cfg, env, policy, run_dir=None):
        super().__init__(cfg, env, policy, run_dir)
        c = cfg.loss
        self.buffer = make_replay(cfg.buffer, c.n_steps, env.num_envs, policy, cfg.seed, run_dir)
        self.loss = DQNLoss(
            policy,
            gamma=c.gamma,
            n_steps=c.n_steps,
            double_dqn=c.double_dqn,
            loss_function=c.loss_function,
            reduction=c.reduction,
            target_update=c.target_update,
            target_update_every=c.target_update_every,
            tau=c.tau,
            burn_in=self.buffer.burn_in,
        )
        policy.epsilon = c.eps_start

    def update(self, batch, progress, frames, step):
        """Logs ``epsilon``, the exploration rate of the next rollout."""
        c = self.cfg.loss
        self.buffer.extend(batch)
        n = c.utd_ratio if frames >= c.warmup_frames and self.buffer.can_sample() else 0
        for _ in range(n):
            sample = self.buffer.sample()
            terms = self.loss(sample)
            step(terms)
            self.buffer.update_priorities(sample, terms["td_error"])
            self.loss.update_target()
        self.policy.epsilon = linear_schedule(c.eps_start, c.eps_end, c.eps_frames, frames)
        return {"epsilon": self.policy.epsilon}

    def state_parts(self):
        return {"dqn": TargetState(self.loss, self.policy)}, {"buffer": self.buffer}

    def close(self):
        # a memmap made for this run only is scratch space
        self.buffer.close(delete=self.cfg.buffer.path is None)


class TargetState:
    """The DQN loss's target parameters and update count, and the policy's epsilon."""

    def __init__(self, loss, policy):
        self.loss, self.policy = loss, policy

    def state_dict(self) -> dict:
        return {**self.loss.target.state_dict(), "epsilon": float(self.policy.epsilon)}

    def load_state_dict(self, state: dict) -> None:
        self.loss.target.load_state_dict(state)
        self.policy.epsilon = float(state["epsilon"])
