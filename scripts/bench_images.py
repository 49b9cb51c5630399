"""bench_ppo.py's image cases: recurrent PPO on image observations, rltool vs sb3-contrib
RecurrentPPO at the same settings and the same network, parameter counts side by side.

  minigrid  MiniGrid-MemoryS7-v0 (env=minigrid policy=lstm, the shipped PPO defaults): the 7x7
            symbolic view embedded per channel -> rltool's small CNN, beside the direction one-hot
            -> LSTM 64 -> MLP 64 -> heads; SB3: MultiInputLstmPolicy with a features extractor
            of that architecture (below)
  atari     ALE/Pong-v5 (env=atari policy=lstm: gymnasium's AtariPreprocessing, rl-zoo's Atari
            PPO): the Nature CNN (512 features) -> LSTM 256 -> heads; SB3: CnnLstmPolicy (its
            NatureCNN is the same stack)

Both sides: one torch thread, gymnasium's sync vector env in the process, the encoder shared by
actor and critic, separate LSTMs for actor and critic. Speed is training frames per CPU-second of
the process (evaluations left out), so that a busy machine slows both alike; a final greedy
evaluation of rltool's policy is printed as a sanity check only (SB3's is not measured here).

    python scripts/bench_ppo.py --case minigrid --seeds 1 --frames 20000
    python scripts/bench_ppo.py --case atari --seeds 1 --frames 8192
"""

from __future__ import annotations

import time

import gymnasium as gym
import numpy as np
import torch
from cpu_clock import train_cpu
from hydra import compose, initialize_config_dir
from torch import nn

from rltool.config.store import conf_dir, register_configs, to_config
from rltool.envs.factory import ATARI, resolve_id
from rltool.modules import make_policy

IMAGE_CASES = {"minigrid": "env=minigrid", "atari": "env=atari"}
SB3, FUSED = "sb3-contrib RecurrentPPO", "rltool, optim.fused=true"


def rltool_config(case: str, seed: int, frames: int, extra: tuple[str, ...] = ()):
    register_configs()
    overrides = [
        *extra,
        IMAGE_CASES[case],
        "policy=lstm",
        f"seed={seed}",
        f"total_frames={frames}",
        f"eval.every_frames={10 * frames}",  # the final evaluation only
        "eval.episodes=4",
        "eval.final_episodes=4",
        "logger.progress=none",
        "checkpoint.every_frames=null",
        "num_threads=1",
    ]
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        return to_config(compose("config", overrides))


def run_rltool(cfg) -> tuple[float, float, int]:
    """(training frames per CPU-second, the final eval's mean return, parameter count)."""
    summary, cpu, _ = train_cpu(cfg)
    return summary["frames"] / cpu, summary["eval/return_mean"], rltool_params(cfg)


def rltool_params(cfg) -> int:
    from rltool.envs import make_env

    env = make_env(cfg.env, num_envs=1)
    try:
        return sum(p.numel() for p in make_policy(cfg.policy, env.specs).parameters())
    finally:
        env.close()


def grid_extractor():
    """rltool's encoder for MiniGrid (rltool/modules/encoders.py) as an SB3 features extractor
    class: the image's codes embedded per channel (a table of 256 codes x embed_dim for each
    channel), the small 2x2 conv stack, a linear layer with ReLU; the direction one-hot beside
    it."""
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

    class SymbolicGridExtractor(BaseFeaturesExtractor):
        def __init__(self, observation_space, embed_dim: int = 8, features: int = 256):
            super().__init__(observation_space, features + int(observation_space["direction"].n))
            c, h, w = observation_space["image"].shape  # channel-first (SB3's VecTransposeImage)
            self.embed = nn.Embedding(256 * c, embed_dim)
            offset = torch.arange(c).view(1, c, 1, 1) * 256
            self.register_buffer("offset", offset, persistent=False)
            convs, width = [], c * embed_dim
            for out in (16, 32, 64):
                convs += [nn.Conv2d(width, out, 2, 1), nn.ReLU()]
                width = out
            self.convs = nn.Sequential(*convs, nn.Flatten())
            self.linear = nn.Sequential(nn.Linear(width * (h - 3) * (w - 3), features), nn.ReLU())

        def forward(self, obs):
            e = self.embed(obs["image"].long() + self.offset)  # [N, C, H, W, E]
            x = e.permute(0, 1, 4, 2, 3).flatten(1, 2)  # [N, C*E, H, W]
            return torch.cat([self.linear(self.convs(x)), obs["direction"].float().flatten(1)], -1)

    return SymbolicGridExtractor


def _sb3_env(case: str, cfg):
    env_id = resolve_id(cfg.env).split(":", 1)[-1]
    if case == "minigrid":
        import minigrid  # noqa: F401  (registers the envs)

        return gym.wrappers.FilterObservation(gym.make(env_id), list(cfg.env.obs_keys))
    import ale_py

    gym.register_envs(ale_py)
    env = gym.wrappers.AtariPreprocessing(gym.make(env_id, frameskip=1), **ATARI)
    return _channel_last(env)


def _channel_last(env):
    """(84, 84) -> (84, 84, 1): SB3's image checks want 3 dims (it transposes to CHW itself)."""
    space = gym.spaces.Box(0, 255, (*env.observation_space.shape, 1), np.uint8)
    return gym.wrappers.TransformObservation(env, lambda o: o[..., None], space)


def sb3_kwargs(cfg) -> dict:
    """rltool's PPO settings in SB3's names (linear schedules where rltool anneals)."""
    lin = lambda v, on: (lambda p: p * v) if on else v  # noqa: E731 (SB3 passes what is left)
    n, fpb, loss = cfg.env.num_envs, cfg.collector.frames_per_batch, cfg.loss
    return dict(
        n_steps=fpb // n,
        batch_size=fpb // loss.num_minibatches,
        n_epochs=loss.epochs,
        gamma=loss.gamma,
        gae_lambda=loss.gae_lambda,
        learning_rate=lin(cfg.optim.lr, cfg.optim.anneal_lr),
        clip_range=lin(loss.clip_epsilon, loss.anneal_clip),
        ent_coef=loss.entropy_coef,
        vf_coef=loss.value_coef,
        max_grad_norm=cfg.optim.max_grad_norm,
        normalize_advantage=loss.normalize_advantage,
        seed=cfg.seed,
        device="cpu",
        verbose=0,
    )


def run_sb3(case: str, cfg) -> tuple[float, int]:
    """(training frames per CPU-second, parameter count) of sb3-contrib's RecurrentPPO."""
    from sb3_contrib import RecurrentPPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = make_vec_env(lambda: _sb3_env(case, cfg), n_envs=cfg.env.num_envs, seed=cfg.seed)
    if cfg.env.normalize_reward:
        venv = VecNormalize(venv, norm_obs=False, norm_reward=True, gamma=cfg.loss.gamma)
    pol = cfg.policy
    policy_kwargs = dict(
        activation_fn=nn.ReLU if pol.activation == "relu" else nn.Tanh,
        lstm_hidden_size=pol.hidden_size,
        n_lstm_layers=pol.num_layers,
        enable_critic_lstm=True,  # rltool: shared_torso=false, a critic LSTM of its own
        shared_lstm=False,
        net_arch=dict(pi=list(pol.hidden_sizes), vf=list(pol.hidden_sizes)),
        ortho_init=False,
    )
    if case == "minigrid":
        policy_kwargs |= dict(
            features_extractor_class=grid_extractor(),
            features_extractor_kwargs=dict(embed_dim=pol.embed_dim, features=pol.cnn_features),
            normalize_images=False,  # codes, not intensities
        )
        name = "MultiInputLstmPolicy"
    else:
        policy_kwargs |= dict(features_extractor_kwargs=dict(features_dim=pol.cnn_features))
        name = "CnnLstmPolicy"
    model = RecurrentPPO(name, venv, policy_kwargs=policy_kwargs, **sb3_kwargs(cfg))
    params = sum(p.numel() for p in model.policy.parameters())
    t0 = time.process_time()
    model.learn(cfg.total_frames)
    return model.num_timesteps / (time.process_time() - t0), params


def main(a) -> None:
    torch.set_num_threads(1)
    floor = measure_floor(a.case, rltool_config(a.case, 0, a.frames)) if a.floor else None
    rows = []
    for seed in range(a.seeds):
        cfg = rltool_config(a.case, seed, a.frames)
        fps, final, params = run_rltool(cfg)
        print(f"rltool seed {seed}: {fps:,.0f} frames/CPU-s, final eval {final:.2f}", flush=True)
        row = {"rltool": (fps, params)}
        if a.fused:  # the same run with Adam's fused kernel (optim.fused, off by default)
            fused, _, _ = run_rltool(rltool_config(a.case, seed, a.frames, ("optim.fused=true",)))
            print(f"rltool seed {seed}, optim.fused=true: {fused:,.0f} frames/CPU-s", flush=True)
            row[FUSED] = (fused, params)
        if not a.no_sb3:
            try:
                row[SB3] = run_sb3(a.case, cfg)
            except ImportError as e:
                print(f"sb3-contrib reference skipped: {e} (pip install -e '.[bench]')")
                a.no_sb3 = True
            else:
                print(f"sb3    seed {seed}: {row[SB3][0]:,.0f} frames/CPU-s")
        rows.append(row)
    print(
        f"\ncase {a.case}: {resolve_id(cfg.env)}, policy=lstm, {a.frames:,} frames, {a.seeds} "
        f"seed(s), 1 thread; {cfg.env.num_envs} envs x "
        f"{cfg.collector.frames_per_batch // cfg.env.num_envs} steps, {cfg.loss.epochs} epochs of "
        f"{cfg.loss.num_minibatches} minibatch(es)\n"
    )
    print(f"| {'implementation':<26} | parameters | train frames/CPU-s (median) |")
    print(f"|{'-' * 28}|{'-' * 12}|{'-' * 29}|")
    medians = {}
    for name in rows[0]:
        fps = float(np.median([r[name][0] for r in rows]))
        medians[name] = fps
        print(f"| {name:<26} | {rows[0][name][1]:>10,} | {fps:>27,.0f} |")
    theirs = medians.get(SB3)
    for name in (n for n in medians if theirs and n != SB3):
        print(f"\nratio {name} / sb3-contrib: {medians[name] / theirs:.2f}x frames per CPU-second")
    if floor is not None:
        print_floor(floor, cfg, medians)


def measure_floor(case: str, cfg) -> dict[str, float]:
    """The kernel floor (scripts/kernel_floor.py), measured before any training runs."""
    from kernel_floor import kernel_floor

    return kernel_floor(cfg, lambda: _sb3_env(case, cfg))


def print_floor(f: dict[str, float], cfg, medians: dict[str, float]) -> None:
    """The kernel floor beside the measured figures."""
    print(
        f"\nkernel floor, per gradient step: network forward + backward {f['gradient_step_ms']:.1f}"
        f" ms, fused Adam {f['adam_ms']:.2f} ms; per env step ({cfg.env.num_envs} envs): acting "
        f"forward {f['act_ms']:.2f} ms, the env's own stepping {f['env_step_ms']:.2f} ms\n"
        f"=> {f['cpu_s']:.1f} CPU-s for {cfg.total_frames:,} frames: at most "
        f"{f['frames_per_s']:,.0f} frames/CPU-s for any implementation on these kernels"
    )
    if "rltool" in medians:
        print(f"rltool reaches {medians['rltool'] / f['frames_per_s']:.0%} of the floor's figure")
    if SB3 in medians:
        bound = f["frames_per_s"] / medians[SB3]
        print(f"the most any implementation can be ahead of sb3-contrib here: {bound:.2f}x")
