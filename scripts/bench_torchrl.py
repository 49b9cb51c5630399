"""bench_ppo.py's TorchRL peer (``--peer torchrl``): the settings it hands scripts/peer_torchrl.py,
the venv the peer runs in, and one run of it.

torchrl 0.14.1 (the newest on the registry) needs tensordict < 0.15 and rltool >= 0.15, so the
peer runs in a venv of its own, made here when missing: ``python3 -m venv``, ``pip install
torch==2.13.0``, then torchrl, tensordict and gymnasium under a ``torch==2.13.0`` constraint.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEER = HERE / "peer_torchrl.py"
TORCH = "torch==2.13.0"
PACKAGES = ["torchrl==0.14.1", "tensordict<0.15", "gymnasium>=1.1"]  # 1.1: AutoresetMode


def torchrl_settings(cfg, seed: int, frames: int, eval_every: int) -> dict:
    """peer_torchrl.Settings of an rltool run's config: one source, the config rltool trains."""
    e, c, o, p = cfg.env, cfg.loss, cfg.optim, cfg.policy
    return {
        "env_id": e.id,
        "obs_keep": None if e.obs_keep is None else list(e.obs_keep),
        "normalize_obs": e.normalize_obs,
        "normalize_obs_frames": e.normalize_obs_frames,
        "normalize_reward": e.normalize_reward,
        "clip_obs": e.clip_obs,
        "num_envs": e.num_envs,
        "steps": cfg.collector.frames_per_batch // e.num_envs,
        "epochs": c.epochs,
        "num_minibatches": c.num_minibatches,
        "gamma": c.gamma,
        "lam": c.gae_lambda,
        "lr": o.lr,
        "adam_eps": o.eps,
        "anneal_lr": o.anneal_lr,
        "clip": c.clip_epsilon,
        "anneal_clip": c.anneal_clip,
        "ent": c.entropy_coef,
        "anneal_ent": c.anneal_entropy,
        "vf": c.value_coef,
        "max_grad_norm": o.max_grad_norm,
        "normalize_advantage": c.normalize_advantage,
        "refresh_states": c.refresh_states,
        "hidden_size": p.hidden_size,
        "num_layers": p.num_layers,
        "encoder_sizes": list(p.encoder_sizes),
        "hidden_sizes": list(p.hidden_sizes),
        "activation": p.activation,
        "shared_torso": p.shared_torso,
        "eval_episodes": cfg.eval.episodes,
        "final_episodes": cfg.eval.final_episodes,
        "eval_seed_offset": cfg.eval.seed_offset,
        "seed": seed,
        "frames": frames,
        "eval_every": eval_every,
        "num_threads": cfg.num_threads,
    }


def ensure_venv(venv: Path) -> Path:
    """The venv's python, after making the venv if it has no torchrl yet."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import torchrl, gymnasium"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"making the TorchRL peer's venv at {venv} (once)", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, TORCH], check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(TORCH + "\n")  # torchrl must not pull another torch
    subprocess.run([*pip, *PACKAGES, "-c", f.name], check=True)
    Path(f.name).unlink()
    return python


def run_torchrl(python: Path, settings: dict):
    """One peer run: (train frames/s, [(frames, eval return mean)]), as bench_ppo's runners."""
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "result.json"
        cmd = [str(python), str(PEER), "--settings", json.dumps(settings), "--out", str(out)]
        subprocess.run(cmd, check=True)
        result = json.loads(out.read_text())
    evals = [(int(f), float(r)) for f, r in result["evals"]]
    return result["frames"] / result["train_s"], evals
