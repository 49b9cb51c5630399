"""The training loop: same seed, same numbers; a user env from the working directory."""

import textwrap

from conftest import make_cfg, metric_rows, run_cli

from rltool.train import train


def test_same_seed_same_metrics_and_another_seed_differs(tmp_path):
    runs = {}
    for name, seed in [("a", 1), ("b", 1), ("c", 2)]:
        d = tmp_path / name
        d.mkdir()
        cfg = make_cfg(
            f"seed={seed}",
            "total_frames=768",
            "eval.every_frames=512",
            "eval.episodes=2",
            "eval.final_episodes=2",
            "logger.progress=none",
            "loss.epochs=2",
        )
        train(cfg, d)
        runs[name] = metric_rows(d)
    assert len(runs["a"]) == 3 and runs["a"] == runs["b"]
    assert runs["a"] != runs["c"]


def test_how_often_a_run_evaluates_leaves_its_training_unchanged(tmp_path):
    trained = {}
    for every in (256, 1024):
        d = tmp_path / str(every)
        d.mkdir()
        overrides = ["env=cartpole_pomdp", "policy=gru", "total_frames=1024", "loss.epochs=2"]
        overrides.append("collector.frames_per_batch=256")  # 4 batches (its tuned file: 1)
        train(make_cfg(*overrides, f"eval.every_frames={every}", "logger.progress=none"), d)
        trained[every] = [
            {k: v for k, v in r.items() if not k.startswith("eval/")} for r in metric_rows(d)
        ]
    assert len(trained[256]) == 4 and trained[256] == trained[1024]


def test_user_env_module_from_working_directory_in_async_workers(tmp_path):
    (tmp_path / "my_env_mod.py").write_text(
        textwrap.dedent("""
        import gymnasium as gym
        import numpy as np

        class Corridor(gym.Env):
            observation_space = gym.spaces.Box(0, 10, (1,), np.float32)
            action_space = gym.spaces.Discrete(2)

            def reset(self, *, seed=None, options=None):
                super().reset(seed=seed)
                self.x = 0
                return np.zeros(1, np.float32), {}

            def step(self, a):
                self.x += int(a)
                return np.array([self.x], np.float32), float(a), self.x >= 5, False, {}

        gym.register("Corridor-v0", entry_point=Corridor, max_episode_steps=20)
    """)
    )
    r = run_cli(
        "train",
        "env=gym",
        "env.id=my_env_mod:Corridor-v0",
        "env.backend=async",
        "env.num_envs=2",
        "collector.frames_per_batch=64",
        "total_frames=128",
        "eval.episodes=2",
        "eval.final_episodes=2",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr


def test_target_kl_stops_the_epochs_once_the_policy_has_moved(tmp_path):
    """The first minibatch of a rollout has approx_kl 0 (it is stepped); after that large step
    (lr 0.05, constant) the KL exceeds a tiny target, so each batch runs one epoch: the numbers
    of loss.epochs=1."""
    runs = {}
    for name, extra in [
        ("kl", ["loss.epochs=5", "loss.target_kl=1e-9"]),
        ("one", ["loss.epochs=1"]),
    ]:
        d = tmp_path / name
        d.mkdir()
        cfg = make_cfg(
            "total_frames=512",
            "eval.episodes=2",
            "eval.final_episodes=2",
            "logger.progress=none",
            "optim.lr=0.05",
            "optim.anneal_lr=false",
            *extra,
        )
        train(cfg, d)
        runs[name] = metric_rows(d)
    kl, one = runs["kl"], runs["one"]
    assert [r["epochs"] for r in kl] == ["1", "1"] and [r["epochs"] for r in one] == ["1", "1"]
    assert [r["approx_kl"] for r in kl] != [r["approx_kl"] for r in one]  # it saw a 2nd epoch
    assert [r["train/return_mean"] for r in kl] == [r["train/return_mean"] for r in one]
    assert [r["eval/return_mean"] for r in kl] == [r["eval/return_mean"] for r in one]
