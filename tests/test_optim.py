"""FlatAdam (rltool/optim/adam.py) against torch's foreach Adam: the same parameters to the bit, in
a
run (PPO with a CNN + LSTM on a Dict observation, recurrent DQN with its target network) and op
by op; state dicts that load either way; the per-tensor path where a gradient is missing."""

import copy

import pytest
import torch
from conftest import make_cfg, metric_rows

import rltool.train as train_module
from rltool.optim.adam import FlatAdam
from rltool.run import checkpoint as ckpt
from rltool.runfolder import layout

NESTED = [
    "env=gym",
    "env.id=fake_envs:FakeNested-v0",
    "+env.kwargs={terminate_at:6}",
    "env.image=symbolic",
    "env.num_envs=2",
    "policy=lstm",
    "policy.hidden_size=8",
    "policy.cnn_features=8",
    "collector.frames_per_batch=32",
]
GRU_DQN = ["env=cartpole_pomdp", "policy=gru", "loss=dqn", "loss.warmup_frames=64"]
GRU_DQN += ["loss.utd_ratio=4", "collector.frames_per_batch=32"]
COMMON = ["total_frames=192", "eval.every_frames=96", "eval.episodes=2", "logger.progress=none"]
COMMON += ["optim.anneal_lr=true", "checkpoint.every_frames=96"]


def foreach_adam(cfg, policy):
    return torch.optim.Adam(policy.parameters(), lr=cfg.optim.lr, eps=cfg.optim.eps, foreach=True)


def final_params(run_dir):
    return ckpt.load(ckpt.latest(layout.RunFolder(run_dir).checkpoints))["state"]["policy"]


@pytest.mark.parametrize("overrides", [NESTED, GRU_DQN], ids=["ppo-cnn-lstm", "dqn-gru"])
def test_a_run_with_flat_adam_is_the_run_with_torchs_foreach_adam(tmp_path, monkeypatch, overrides):
    cfg = make_cfg(*overrides, *COMMON)
    runs = {}
    for name in ("flat", "foreach"):
        if name == "foreach":
            monkeypatch.setattr(train_module, "make_optimizer", foreach_adam)
        d = tmp_path / name
        d.mkdir()
        train_module.train(cfg, d)
        runs[name] = (metric_rows(d), final_params(d))
    (rows_a, params_a), (rows_b, params_b) = runs["flat"], runs["foreach"]
    assert len(rows_a) == 6 and rows_a == rows_b
    assert params_a.keys() == params_b.keys()
    for k in params_a:
        assert torch.equal(params_a[k], params_b[k]), k


def make_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 4, 2), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(36, 5)
    )


X = torch.randn(16, 3, 4, 4).contiguous(memory_format=torch.channels_last)  # grads in that layout


def step(net, opt, lr, scale=1.0):
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    (scale * net(X).square().mean()).backward()
    torch.nn.utils.clip_grad_norm_(net.parameters(), 0.5)
    opt.step()


def test_flat_adam_steps_bit_for_bit_as_foreach_and_keeps_params_in_one_buffer():
    nets = [make_net(), make_net()]
    flat = FlatAdam(nets[0].parameters(), lr=1e-2, eps=1e-5)
    ref = torch.optim.Adam(nets[1].parameters(), lr=1e-2, eps=1e-5, foreach=True)
    buffer = flat._flat[0]
    for i in range(30):
        lr, scale = 1e-2 * (1 - i / 30), 10.0 ** (i % 5 - 2)  # annealed lr, gradients of all sizes
        step(nets[0], flat, lr, scale)
        step(nets[1], ref, lr, scale)
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.equal(a, b)
        assert a.untyped_storage().data_ptr() == buffer.untyped_storage().data_ptr()
    assert float(flat.state_dict()["state"][0]["step"]) == 30


def test_state_dicts_load_either_way_and_the_steps_go_on_the_same():
    nets = [make_net(), make_net()]
    ref = torch.optim.Adam(nets[1].parameters(), lr=1e-2, eps=1e-5, foreach=True)
    flat = FlatAdam(nets[0].parameters(), lr=1e-2, eps=1e-5)
    for _ in range(3):  # torch's Adam first (an older checkpoint), then FlatAdam resumes it
        step(nets[1], ref, 1e-2)
    nets[0].load_state_dict(nets[1].state_dict())
    flat.load_state_dict(copy.deepcopy(ref.state_dict()))  # as from a file: no shared tensors
    for _ in range(5):
        step(nets[0], flat, 1e-2)
        step(nets[1], ref, 1e-2)
    back = torch.optim.Adam(nets[1].parameters(), lr=1e-2, eps=1e-5, foreach=True)
    back.load_state_dict(copy.deepcopy(flat.state_dict()))  # and FlatAdam's back into torch's
    for _ in range(5):
        step(nets[0], flat, 1e-2)
        step(nets[1], back, 1e-2)
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.equal(a, b)
    assert flat._flat is not None  # still flat after loading


def test_a_missing_gradient_steps_per_tensor_as_torch_does():
    nets = [make_net(), make_net()]
    flat = FlatAdam(nets[0].parameters(), lr=1e-2, eps=1e-5)
    ref = torch.optim.Adam(nets[1].parameters(), lr=1e-2, eps=1e-5, foreach=True)
    for i in range(6):
        for net, opt in ((nets[0], flat), (nets[1], ref)):
            step(net, opt, 1e-2)
            if i == 2:  # one more step with no gradient for the last layer's bias
                opt.zero_grad(set_to_none=True)
                net(X).square().mean().backward()
                net[-1].bias.grad = None
                opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters(), strict=True):
        assert torch.equal(a, b)
    assert flat._flat is None  # the step counts differ now: per tensor from then on


def test_make_optimizer_picks_flat_adam_and_fused_on_request():
    net = torch.nn.Linear(2, 2)
    assert isinstance(train_module.make_optimizer(make_cfg("env=cartpole"), net), FlatAdam)
    fused = train_module.make_optimizer(make_cfg("env=cartpole", "optim.fused=true"), net)
    assert not isinstance(fused, FlatAdam) and fused.defaults["fused"]
