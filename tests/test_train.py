"""The training loop: same seed, same numbers; a user env from the working directory; the
optimizer."""

import copy
import textwrap

import torch
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


def test_the_fused_adam_takes_a_foreach_checkpoint_and_steps_as_foreach_does():
    """optim.fused=true resumes a run checkpointed with the foreach Adam (the default): the state
    loads and the next steps agree with foreach's to float32 rounding (the two kernels differ in
    the last bit, not in the algorithm)."""
    from rltool.train import make_optimizer

    cfg = make_cfg("env=cartpole", "optim.lr=0.01", "optim.fused=true")
    assert make_optimizer(make_cfg("env=cartpole"), torch.nn.Linear(2, 2)).defaults["foreach"]
    torch.manual_seed(0)
    nets = [torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))]
    nets.append(copy.deepcopy(nets[0]))
    old = torch.optim.Adam(nets[0].parameters(), lr=0.01, eps=cfg.optim.eps, foreach=True)
    x = torch.randn(32, 4)

    def step(net, opt):
        opt.zero_grad()
        net(x).square().mean().backward()
        opt.step()

    for _ in range(3):
        step(nets[0], old)
    nets[1].load_state_dict(nets[0].state_dict())
    fused = make_optimizer(cfg, nets[1])
    assert fused.defaults["fused"]
    fused.load_state_dict(copy.deepcopy(old.state_dict()))  # as from a file: no shared tensors
    for _ in range(20):
        step(nets[0], old)
        step(nets[1], fused)
    assert int(fused.state_dict()["state"][0]["step"]) == 23
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
