"""PPO training speed and sample efficiency: rltool vs stable-baselines3 in the same run.

Cases (same hyperparameters for both, printed side by side; same evaluator: rltool.run.evaluation):
  mlp   CartPole-v1, rl-zoo's PPO settings; threshold 475            vs SB3 PPO
  lstm  CartPole-v1 without velocities, rl-zoo's RecurrentPPO settings; threshold 450
                                                                     vs sb3-contrib RecurrentPPO
  minigrid, atari  image observations, recurrent, frames per CPU-second and parameter counts
        side by side                          vs sb3-contrib RecurrentPPO (scripts/bench_images.py)
Training frames/s excludes evaluation time. frames-to-threshold is the first evaluation (every
--eval-every frames) whose mean return reaches the threshold. Both sides evaluate at the same
frame counts (after the update of the rollout that reaches each multiple of --eval-every) and
end with eval.final_episodes episodes. Medians over --seeds seeds; populations with intervals:
scripts/bench_frames.py.

    python scripts/bench_ppo.py --case mlp --seeds 5
    python scripts/bench_ppo.py --case lstm --seeds 3 --frames 100000
    python scripts/bench_ppo.py --case lstm --seeds 3 --side-by-side   # both at once, 2 cores
    python scripts/bench_ppo.py --case lstm --seeds 3 --peer torchrl   # TorchRL's own (its venv)
    python scripts/bench_ppo.py --case minigrid --seeds 3 --frames 8192 --fused   # + fused Adam
    python scripts/bench_ppo.py --case minigrid --seeds 3 --frames 8192 --floor   # + kernel floor
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

import bench_torchrl
import numpy as np
import torch
from hydra import compose, initialize_config_dir

from rltool import keys as K
from rltool.config.store import conf_dir, register_configs, to_config
from rltool.envs import make_env
from rltool.errors import RunStopped
from rltool.run.evaluation import evaluate
from rltool.specs import Spec
from rltool.train import train

# rl-zoo: ppo.yml CartPole-v1 and ppo_lstm.yml CartPoleNoVel-v1
ZOO = {
    "num_envs": 8,
    "steps": 32,
    "batch": 256,
    "epochs": 20,
    "gamma": 0.98,
    "lam": 0.8,
    "lr": 1e-3,
    "clip": 0.2,
    "ent": 0.0,
    "vf": 0.5,
    "max_grad_norm": 0.5,
}
CASES = {
    "mlp": {
        "threshold": 475.0,
        "env": "cartpole",
        "policy": ["policy=mlp", "policy.hidden_sizes=[64,64]", "policy.activation=tanh"],
    },
    "lstm": {
        "threshold": 450.0,
        "env": "cartpole_pomdp",
        "policy": [
            "policy=lstm",
            "policy.hidden_size=64",
            "policy.num_layers=1",
            "policy.encoder_sizes=[]",
            "policy.hidden_sizes=[64]",
            "policy.shared_torso=false",
            "policy.activation=relu",
            "policy.inputs=[observation]",
        ],
    },
}


def rltool_overrides(case: str, seed: int, frames: int, eval_every: int) -> list[str]:
    z = ZOO
    return [
        f"env={CASES[case]['env']}",
        *CASES[case]["policy"],
        "loss=ppo",
        f"seed={seed}",
        f"total_frames={frames}",
        f"env.num_envs={z['num_envs']}",
        f"collector.frames_per_batch={z['num_envs'] * z['steps']}",
        f"loss.epochs={z['epochs']}",
        f"loss.num_minibatches={z['num_envs'] * z['steps'] // z['batch']}",
        f"loss.gamma={z['gamma']}",
        f"loss.gae_lambda={z['lam']}",
        f"optim.lr={z['lr']}",
        "optim.anneal_lr=true",
        f"loss.clip_epsilon={z['clip']}",
        "loss.anneal_clip=true",
        f"loss.entropy_coef={z['ent']}",
        f"loss.value_coef={z['vf']}",
        f"optim.max_grad_norm={z['max_grad_norm']}",
        "loss.normalize_advantage=true",
        f"eval.every_frames={eval_every}",
        "logger.progress=none",
        "num_threads=1",
    ]


def rltool_config(case, seed, frames, eval_every, extra: tuple[str, ...] = ()):
    """The case's config; ``extra``: more overrides after the case's (one difference
    switched alone, e.g. ``loss.value_coef=1.0``)."""
    register_configs()
    overrides = [*rltool_overrides(case, seed, frames, eval_every), *extra]
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        return to_config(compose("config", overrides))


def run_rltool(case, seed, frames, eval_every, extra: tuple[str, ...] = ()):
    cfg = rltool_config(case, seed, frames, eval_every, extra)
    with tempfile.TemporaryDirectory() as d:
        train(cfg, Path(d))
        rows = list(csv.DictReader((Path(d) / "metrics.csv").open()))
    train_s = sum(float(r["time/collect_s"]) + float(r["time/update_s"]) for r in rows)
    evals = [
        (int(r["frames"]), float(r["eval/return_mean"])) for r in rows if r["eval/return_mean"]
    ]
    return int(rows[-1]["frames"]) / train_s, evals, cfg


class SB3Policy:
    """An SB3 model behind rltool's policy API, so both are scored by the same evaluator."""

    def __init__(self, model, recurrent: bool, normalize=None, hidden: int = 64):
        self.model, self.recurrent, self.explore, self.has_critic = model, recurrent, False, False
        self.normalize = normalize  # VecNormalize.normalize_obs (frozen statistics) or None
        self.training = False
        self.state_specs = (
            {"sb3_h": Spec((1, hidden)), "sb3_c": Spec((1, hidden))} if recurrent else {}
        )
        self.input_specs = {}

    def eval(self):
        return self

    def parameters(self):  # the collector reads the policy's device from its parameters
        return self.model.policy.parameters()

    def train(self, mode=True):
        return self

    def step(self, inputs, state, is_init):
        obs = inputs[K.OBSERVATION].numpy()
        obs = self.normalize(obs) if self.normalize is not None else obs
        if not self.recurrent:
            action, _ = self.model.predict(obs, deterministic=True)
            return {K.ACTION: torch.as_tensor(action)}, {}
        hc = tuple(state[k].transpose(0, 1).numpy() for k in ("sb3_h", "sb3_c"))
        action, (h, c) = self.model.predict(
            obs, state=hc, episode_start=is_init.numpy()[:, 0], deterministic=True
        )
        nxt = {
            "sb3_h": torch.as_tensor(h).transpose(0, 1),
            "sb3_c": torch.as_tensor(c).transpose(0, 1),
        }
        return {K.ACTION: torch.as_tensor(action)}, nxt


def run_sb3(case, seed, frames, eval_every, cfg):
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    z, recurrent = ZOO, case == "lstm"
    keep = cfg.env.obs_keep
    wrapper = None
    if keep is not None:
        import gymnasium as gym

        def wrapper(e):
            space = gym.spaces.Box(e.observation_space.low[keep], e.observation_space.high[keep])
            return gym.wrappers.TransformObservation(e, lambda o: o[keep], space)

    venv = make_vec_env(cfg.env.id, n_envs=z["num_envs"], seed=seed, wrapper_class=wrapper)
    if cfg.env.normalize_obs or cfg.env.normalize_reward:  # as rl-zoo's `normalize: true`
        venv = VecNormalize(
            venv,
            norm_obs=cfg.env.normalize_obs,
            norm_reward=cfg.env.normalize_reward,
            gamma=z["gamma"],
        )
    lin = lambda v: lambda p: p * v  # noqa: E731  (SB3 schedules get the remaining progress)
    kwargs = dict(
        n_steps=z["steps"],
        batch_size=z["batch"],
        n_epochs=z["epochs"],
        gamma=z["gamma"],
        gae_lambda=z["lam"],
        learning_rate=lin(z["lr"]),
        clip_range=lin(z["clip"]),
        ent_coef=z["ent"],
        vf_coef=z["vf"],
        max_grad_norm=z["max_grad_norm"],
        seed=seed,
        device="cpu",
        verbose=0,
    )
    if recurrent:
        from sb3_contrib import RecurrentPPO

        kwargs["policy_kwargs"] = dict(  # rl-zoo's ppo_lstm.yml CartPoleNoVel-v1
            ortho_init=False,
            activation_fn=torch.nn.ReLU,
            lstm_hidden_size=64,
            enable_critic_lstm=True,
            net_arch=dict(pi=[64], vf=[64]),
        )
        model = RecurrentPPO("MlpLstmPolicy", venv, **kwargs)
    else:
        model = PPO("MlpPolicy", venv, **kwargs)
    # raw observations: the SB3 policy normalises them with its VecNormalize's frozen statistics
    raw = dataclasses.replace(cfg.env, normalize_obs=False, normalize_reward=False)
    eval_env = make_env(raw, num_envs=cfg.eval.episodes, training=False)
    norm = venv.normalize_obs if isinstance(venv, VecNormalize) else None
    evals, eval_time, next_eval = [], [0.0], [eval_every]

    def score(episodes):
        t = time.perf_counter()
        policy = SB3Policy(model, recurrent, norm)
        ret = evaluate(policy, eval_env, seed + cfg.eval.seed_offset, episodes)
        evals.append((model.num_timesteps, ret["eval/return_mean"]))
        eval_time[0] += time.perf_counter() - t

    class Eval(BaseCallback):
        """Evaluates where rltool's loop does (rltool/train.py): after the update of the first
        rollout that reaches the next multiple of ``eval_every`` (a rollout starts after the
        previous update), the same frame counts on both sides; the final one after learn."""

        def _on_rollout_start(self):
            if self.num_timesteps >= next_eval[0]:
                score(cfg.eval.episodes)
                next_eval[0] += eval_every

        def _on_step(self):
            return True

    start = time.perf_counter()
    model.learn(frames, callback=Eval())
    wall = time.perf_counter() - start - eval_time[0]
    score(cfg.eval.final_episodes)  # as rltool's final evaluation: more episodes
    return model.num_timesteps / wall, evals, model


def _child(fn, args, queue):
    """Runs ``fn(*args)`` (on the core the parent gives it) and sends back (frames/s, evals)."""
    torch.set_num_threads(1)
    try:
        fps, evals, _ = fn(*args)
    except RunStopped:  # a repeat stopped because SB3 had ended: not a result
        return
    queue.put((fps, evals))


def side_by_side(case, seed, frames, eval_every, swap_s: float = 5.0):
    """SB3 and rltool at once, one core each, rltool repeating the same seed until SB3 ends, so
    both are timed under the same load (a shared machine's speed drifts over minutes). The two
    swap cores every ``swap_s`` seconds, so a core slowed by its neighbours slows both alike.
    rltool's frames/s: the median of its repeats that ended before SB3 did (the first always
    counts); a repeat still running when SB3 ends is stopped and dropped. Returns (ours, theirs,
    repeats), each result (frames/s, evaluations); the evaluations are the first repeat's (the
    others must equal them: a seeded run is deterministic)."""
    ctx = mp.get_context("spawn")
    cfg = rltool_config(case, seed, frames, eval_every)
    cores = sorted(os.sched_getaffinity(0))[:2]

    def start(fn, args, q, core):
        proc = ctx.Process(target=_child, args=(fn, args, q))
        proc.start()
        os.sched_setaffinity(proc.pid, {core})
        return proc

    q_sb3 = ctx.Queue()
    sb3 = start(run_sb3, (case, seed, frames, eval_every, cfg), q_sb3, cores[0])
    ours, swapped, last = [], False, time.monotonic()
    while True:
        q = ctx.Queue()
        p = start(run_rltool, (case, seed, frames, eval_every), q, cores[1 - swapped])
        while p.is_alive() and sb3.is_alive():
            p.join(0.5)
            if time.monotonic() - last >= swap_s:
                swapped, last = not swapped, time.monotonic()
                try:
                    os.sched_setaffinity(sb3.pid, {cores[swapped]})
                    os.sched_setaffinity(p.pid, {cores[1 - swapped]})
                except ProcessLookupError:  # one of them has just ended
                    pass
        if p.is_alive() and ours:  # SB3 has ended: this repeat would run alone
            p.terminate()  # rltool stops cleanly on SIGTERM (and its temporary folder goes)
            p.join(60)
            if p.is_alive():
                p.kill()
            break
        ours.append(q.get(timeout=3600))
        p.join()
        if not sb3.is_alive():
            break
    theirs = q_sb3.get(timeout=3600)
    sb3.join()
    if any(r[1] != ours[0][1] for r in ours):
        print(f"warning: rltool's repeats of seed {seed} evaluated differently", flush=True)
    fps = statistics.median(r[0] for r in ours)
    return (fps, ours[0][1]), theirs, len(ours)


def first_reach(evals, threshold):
    return next((f for f, r in evals if r >= threshold), float("inf"))


def summarize(name, results, threshold):
    fps = statistics.median(r[0] for r in results)
    reach = statistics.median(first_reach(r[1], threshold) for r in results)
    finals = [r[1][-1][1] for r in results]
    return {"name": name, "fps": fps, "reach": reach, "finals": finals}


def all_side_by_side(a):
    """Every seed with :func:`side_by_side`: (ours, theirs), lists of (frames/s, evaluations)."""
    ours, theirs = [], []
    for seed in range(a.seeds):
        mine, ref, n = side_by_side(a.case, seed, a.frames, a.eval_every)
        ours.append(mine)
        theirs.append(ref)
        print(
            f"seed {seed}: rltool {mine[0]:,.0f} frames/s (median of {n} repeats), final "
            f"eval {mine[1][-1][1]:.1f}; sb3 {ref[0]:,.0f} frames/s, final eval "
            f"{ref[1][-1][1]:.1f}",
            flush=True,
        )
    return ours, theirs


def all_in_turn(a):
    """Every seed, rltool then the peer (SB3 unless --no-sb3 or not installed; TorchRL with
    --peer torchrl): (ours, theirs, cfg)."""
    ours, theirs, cfg, with_sb3 = [], [], None, not a.no_sb3 and a.peer == "sb3"
    python = bench_torchrl.ensure_venv(Path(a.torchrl_venv)) if a.peer == "torchrl" else None
    for seed in range(a.seeds):
        fps, evals, cfg = run_rltool(a.case, seed, a.frames, a.eval_every)
        ours.append((fps, evals))
        print(f"rltool seed {seed}: {fps:,.0f} frames/s, final eval {evals[-1][1]:.1f}", flush=True)
        if python is not None:
            settings = bench_torchrl.torchrl_settings(cfg, seed, a.frames, a.eval_every)
            theirs.append(bench_torchrl.run_torchrl(python, settings))
        if not with_sb3:
            continue
        try:
            fps, evals, _ = run_sb3(a.case, seed, a.frames, a.eval_every, cfg)
        except ImportError as e:
            print(f"stable-baselines3 reference skipped: {e} (pip install -e '.[bench]')")
            with_sb3 = False
            continue
        theirs.append((fps, evals))
        print(f"sb3    seed {seed}: {fps:,.0f} frames/s, final eval {evals[-1][1]:.1f}", flush=True)
    return ours, theirs, cfg


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--case", choices=sorted([*CASES, "minigrid", "atari"]), default="mlp")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--frames", type=int, default=100_000)
    p.add_argument("--eval-every", type=int, default=5_000)
    p.add_argument("--no-sb3", action="store_true", help="skip the stable-baselines3 reference")
    p.add_argument(
        "--peer",
        choices=["sb3", "torchrl"],
        default="sb3",
        help="the reference: stable-baselines3, or (lstm case) TorchRL's own recurrent PPO,\n"
        "run per seed after rltool's in the venv --torchrl-venv (made when missing)",
    )
    p.add_argument("--torchrl-venv", default=".venv-torchrl", help="the TorchRL peer's venv")
    p.add_argument(
        "--side-by-side",
        action="store_true",
        help="run SB3 and rltool at once, one core each, swapping cores every 5 s (rltool\n"
        "repeats a seed until SB3 ends): both timed under the same load; needs 2 cores and SB3",
    )
    p.add_argument(
        "--fused",
        action="store_true",
        help="image cases: also time rltool with optim.fused=true (Adam's fused kernel)",
    )
    p.add_argument(
        "--floor",
        action="store_true",
        help="image cases: also measure the kernel floor (scripts/kernel_floor.py): the most\n"
        "frames/CPU-s any implementation of this network on torch's CPU kernels can reach",
    )
    a = p.parse_args()
    if a.case in ("minigrid", "atari"):  # image observations: scripts/bench_images.py
        if a.side_by_side:
            p.error("--side-by-side: the mlp and lstm cases only (the image cases time CPU-s)")
        import bench_images

        return bench_images.main(a)
    if a.peer == "torchrl" and (a.case != "lstm" or a.side_by_side):
        p.error("--peer torchrl: the lstm case, in turn (not --side-by-side)")
    torch.set_num_threads(1)
    threshold = CASES[a.case]["threshold"]
    if a.side_by_side:
        if len(os.sched_getaffinity(0)) < 2 or a.no_sb3:
            p.error("--side-by-side needs 2 cores and the SB3 reference (not --no-sb3)")
        ours, theirs = all_side_by_side(a)
        cfg = rltool_config(a.case, 0, a.frames, a.eval_every)
    else:
        ours, theirs, cfg = all_in_turn(a)
    print(
        "\nhyperparameters (both):",
        ", ".join(f"{k}={v}" for k, v in ZOO.items()),
        "; lr and clip annealed linearly to 0; rltool policy:",
        " ".join(CASES[a.case]["policy"]),
        f"; normalised observations / rewards: {cfg.env.normalize_obs} / "
        f"{cfg.env.normalize_reward} ("
        + ("TorchRL: rltool's, in numpy" if a.peer == "torchrl" else "SB3: VecNormalize")
        + " when either is on)",
    )
    rows = [summarize("rltool", ours, threshold)]
    if theirs:
        name = "sb3-contrib RecurrentPPO" if a.case == "lstm" else "sb3 PPO"
        rows.append(summarize("TorchRL 0.14.1" if a.peer == "torchrl" else name, theirs, threshold))
    print(
        f"\ncase {a.case}: {cfg.env.id}{' (velocities hidden)' if cfg.env.obs_keep else ''}, "
        f"{a.frames:,} frames, {a.seeds} seeds, 1 thread, median over seeds"
        + (", side by side (one core each, at once)" if a.side_by_side else "")
        + "\n"
    )
    print(f"| {'implementation':<26} | train frames/s | frames to {threshold:.0f} | final evals |")
    print(f"|{'-' * 28}|{'-' * 16}|{'-' * 15}|{'-' * 13}|")
    for r in rows:
        finals = " / ".join(f"{x:.0f}" for x in r["finals"])
        print(f"| {r['name']:<26} | {r['fps']:>14,.0f} | {r['reach']:>13,.0f} | {finals} |")
    if len(rows) == 2:
        reach = rows[1]["reach"] / rows[0]["reach"] if np.isfinite(rows[0]["reach"]) else None
        print(
            f"\nratio rltool / reference: {rows[0]['fps'] / rows[1]['fps']:.2f}x frames/s, "
            + (f"{reach:.2f}x" if reach is not None else "-")
            + f" fewer frames to {threshold:.0f}"
        )


if __name__ == "__main__":
    np.set_printoptions(precision=3)
    main()
