"""The training session in-process: exact resume with normalisation, fresh-episode fallback,
non-finite steps and models."""

from __future__ import annotations

import dataclasses
import math
import signal
from types import SimpleNamespace

import pytest
import torch
from conftest import metric_rows

from rltool import errors
from rltool.algos.ppo.config import PPOConfig
from rltool.config import (
    CheckpointConfig,
    CollectorConfig,
    Config,
    EnvConfig,
    EvalConfig,
    LoggerConfig,
    OptimConfig,
    PolicyConfig,
)
from rltool.envs.vector import VectorEnv
from rltool.errors import EXIT_DIVERGED, RunStopped
from rltool.optim.guard import NonFiniteGuard
from rltool.run import checkpoint as ckpt
from rltool.run.session import Counters, Session, progress
from rltool.testing import faults as _faults
from rltool.train import build, gradient_step, train


def pendulum(**kw) -> Config:
    """Pendulum with observation and reward normalisation, a Gaussian MLP policy, 4 x 16 steps."""
    return Config(
        env=EnvConfig(id="Pendulum-v1", num_envs=4, normalize_obs=True, normalize_reward=True),
        policy=PolicyConfig(hidden_sizes=[16]),
        loss=PPOConfig(epochs=2, num_minibatches=2, anneal_clip=True),
        collector=CollectorConfig(frames_per_batch=64),
        optim=OptimConfig(anneal_lr=True),
        logger=LoggerConfig(progress="none"),
        eval=EvalConfig(every_frames=128, episodes=2, final_episodes=2),
        checkpoint=CheckpointConfig(every_frames=128),
        total_frames=384,
        **kw,
    )


class Crash(Exception):
    pass


def test_exact_resume_with_normalisation_in_process(tmp_path, monkeypatch):
    for name in "ab":
        (tmp_path / name).mkdir()
    train(pendulum(), tmp_path / "a")

    seen = []

    def crash_on_second_write(point):  # a crash between fsync and rename of checkpoint 256
        seen.append(point)
        if seen.count("checkpoint.after_fsync") == 2:
            raise Crash

    monkeypatch.setattr(_faults, "test_hook", crash_on_second_write)
    with pytest.raises(Crash):
        train(pendulum(), tmp_path / "b")
    monkeypatch.setattr(_faults, "test_hook", None)
    assert ckpt.latest(tmp_path / "b" / "checkpoints").name == "ckpt-000000000128.pt"
    train(pendulum(resume=str(tmp_path / "b")), tmp_path / "b")
    assert metric_rows(tmp_path / "b") == metric_rows(tmp_path / "a")


def test_an_env_without_state_resumes_with_fresh_episodes_and_a_warning(
    tmp_path, monkeypatch, capsys, console
):
    train(dataclasses.replace(pendulum(), total_frames=128), tmp_path)
    monkeypatch.setattr(VectorEnv, "get_state", lambda self: None)
    run = build(pendulum(resume=str(tmp_path)))
    root = {k: v.clone() for k, v in run.collector._root.items()}
    monkeypatch.setattr(errors, "_WARNED", set())
    capsys.readouterr()
    session = Session.start(run, tmp_path)
    err = capsys.readouterr().err
    assert err.startswith("rltool: warning: env Pendulum-v1 cannot save its state")
    assert "starts fresh episodes" in err.splitlines()[0]  # one line, no Python source line
    assert "warnings.warn" not in err and "UserWarning" not in err
    assert session.counters.frames == 128
    assert all(torch.equal(v, run.collector._root[k]) for k, v in root.items())
    assert run.collector._root["is_init"].all()
    assert not run.env.reward_scaler.ret.any()
    run.collector.close()
    run.eval_env.close()


def _tiny_run(max_grad_norm, hook=None):
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    cfg = SimpleNamespace(optim=SimpleNamespace(max_grad_norm=max_grad_norm))
    return SimpleNamespace(
        cfg=cfg, policy=model, optimizer=opt, guard=NonFiniteGuard(max_in_a_row=3), grad_hook=hook
    )


def test_gradient_step_skips_non_finite_steps_and_stops_after_k_in_a_row():
    run = _tiny_run(0.5)
    model, guard = run.policy, run.guard
    before = [p.detach().clone() for p in model.parameters()]
    x = torch.ones(1, 2)

    def terms(scale):
        return {"loss_a": model(x).sum() * scale, "loss_b": model(x).sum(), "kl": torch.tensor(9.0)}

    gradient_step(run, terms(math.nan))
    run.cfg.optim.max_grad_norm = None  # the norm is still checked without clipping
    gradient_step(run, terms(math.inf))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())  # a skipped step leaves no gradient
    gradient_step(run, terms(1.0))  # a finite step resets the streak
    assert guard.take_skipped() == 2 and guard.take_skipped() == 0
    # the loss is loss_a + loss_b = 2 * (w.x + b), not the diagnostic: SGD moved w by -0.1 * 2
    assert torch.allclose(model.weight, before[0] - 0.2) and torch.allclose(
        model.bias, before[1] - 0.2
    )
    for _ in range(2):
        gradient_step(run, terms(math.nan))
    with pytest.raises(RunStopped, match="3 optimizer steps in a row") as e:
        gradient_step(run, terms(math.nan))
    assert e.value.exit_code == EXIT_DIVERGED


def test_gradient_step_calls_the_hook_between_backward_and_clipping():
    seen = []

    def hook(params):  # e.g. an all-reduce: sees the raw gradients, may replace them
        seen.append([p.grad.clone() for p in params])
        for p in params:
            p.grad.mul_(100.0)

    run = _tiny_run(1.0, hook)
    w0 = run.policy.weight.detach().clone()
    gradient_step(run, {"loss_total": run.policy(torch.ones(1, 2)).sum()})
    assert [g.tolist() for g in seen[0]] == [[[1.0, 1.0]], [1.0]]  # before clipping (norm sqrt 3)
    # after the hook the norm is 100 sqrt(3): clipped to 1, each entry 1/sqrt(3), times lr 0.1
    assert torch.allclose(run.policy.weight, w0 - 0.1 / math.sqrt(3))


def test_a_non_finite_model_never_replaces_the_last_good_checkpoint(tmp_path):
    run = build(pendulum())
    session = Session.start(run, tmp_path)
    session.counters.frames = 64
    good = session.save()
    with torch.no_grad():
        next(run.policy.parameters())[0] = math.nan
    session.counters.frames = 128
    with pytest.raises(RunStopped, match="inf/nan") as e:
        session.save()
    assert e.value.exit_code == EXIT_DIVERGED
    assert ckpt.latest(tmp_path / "checkpoints") == good
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [good.name, "latest"]
    run.collector.close()
    run.eval_env.close()


def test_a_signal_after_the_ranks_voted_waits_for_the_next_iteration(tmp_path, monkeypatch):
    """The ranks vote on stopping once per iteration; a signal that lands after the vote (here:
    during it, once this rank's flag was read) must not stop this rank alone (the other ranks
    go on to the next update's collectives): it stops the run at the next iteration."""
    run = build(pendulum())
    session = Session.start(run, tmp_path)
    votes = []

    def any_(flag):  # one rank's view: nobody had a signal when the flags were read
        votes.append(flag)
        if len(votes) == 1:
            session.stop_signal = signal.SIGTERM  # ... and then this rank's arrives
        return flag

    monkeypatch.setattr(run.comm, "any", any_)  # run.comm is the shared SOLO: restored after
    session.counters.frames = 64
    session.end_iteration({})
    assert votes == [False] and not (tmp_path / "checkpoints").exists()
    session.counters.frames = 128
    with pytest.raises(RunStopped, match="stopped by SIGTERM at 128 frames"):
        session.end_iteration({})
    assert votes == [False, True] and ckpt.latest(tmp_path / "checkpoints").name.endswith("128.pt")
    run.collector.close()
    run.eval_env.close()


def test_schedule_stops_at_zero_when_the_last_batch_overshoots_the_budget():
    c = Counters(anchor_frames=512, anchor_progress=0.25, total_frames=3000)
    assert progress(c, 512) == 0.25
    assert progress(c, 512 + 1244) == pytest.approx(0.625)  # halfway from the anchor
    assert progress(c, 3000) == 1.0 and progress(c, 3072) == 1.0  # not 1.0289: lr would be < 0
