"""Training frames per CPU-second of the suite's tasks (conf/task/), and the CPU seconds of one
evaluation episode: the figures a suite preset's budgets are sized from.

CPU time (this process, one torch thread) rather than wall time, so that a measurement on a busy
machine still says what one core does for one job (`hydra/launcher=joblib hydra.launcher.n_jobs=2`
on 2 cores gives each job about one core). Build time (envs, policy) counts as training.

    python scripts/suite_fps.py --frames 2048 --policies lstm,mlp
    python scripts/suite_fps.py --tasks RepeatPreviousEasy,MemoryS7 --policies gru
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cpu_clock import train_cpu
from hydra import compose, initialize_config_dir

from rltool.config.store import conf_dir, register_configs, to_config


def measure(task: str, policy: str, frames: int, eval_episodes: int) -> tuple[float, float]:
    """(training frames per CPU-second, CPU seconds per evaluation episode)."""
    overrides = [
        f"task={task}",
        f"policy={policy}",
        f"total_frames={frames}",
        f"eval.every_frames={10 * frames}",  # the final evaluation only
        f"eval.final_episodes={eval_episodes}",
        "logger.progress=none",
        "checkpoint.every_frames=null",
    ]
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        cfg = to_config(compose("config", overrides=overrides))
    summary, train_s, eval_s = train_cpu(cfg)
    return summary["frames"] / train_s, eval_s / eval_episodes


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = ",".join(sorted(p.stem for p in (Path(conf_dir()) / "task").glob("*.yaml")))
    p.add_argument("--tasks", default=default)
    p.add_argument("--policies", default="lstm,mlp")
    p.add_argument("--frames", type=int, default=2048)
    p.add_argument("--eval-episodes", type=int, default=20)
    a = p.parse_args()
    register_configs()
    print(f"{'task':28} {'policy':6} {'train fps/core':>14} {'eval s/episode':>14}", flush=True)
    for task in a.tasks.split(","):
        for policy in a.policies.split(","):
            fps, per_episode = measure(task, policy, a.frames, a.eval_episodes)
            print(f"{task:28} {policy:6} {fps:14.0f} {per_episode:14.3f}", flush=True)


if __name__ == "__main__":
    main()
