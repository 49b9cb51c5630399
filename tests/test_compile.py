"""compile=true (rltool/run/compile.py): the compiled acting step and loss give eager's rollouts,
terms and gradients; checkpoints cross between compiled and eager runs; a failing compiler
falls back to eager with one warning. Tiny models (compiling is the slow part)."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.config as inductor_config
from conftest import make_cfg
from torch._dynamo.testing import CompileCounter

from rltool import keys as K
from rltool.api import fit, resume
from rltool.data import minibatches
from rltool.errors import ConfigError
from rltool.losses import add_gae
from rltool.modules.heads import CategoricalHead
from rltool.run import checkpoint as ckpt
from rltool.run.compile import Compiled, compile_run
from rltool.train import build

# an LSTM on the counting env: episodes of 3 steps (resets inside every rollout), 8 x 2 frames
TINY_LSTM = [
    "env.id=FakeCount-v0",
    "env.num_envs=2",
    "env.max_episode_steps=3",
    "policy=lstm",
    "policy.hidden_size=8",
    "policy.hidden_sizes=[8]",
    "collector.frames_per_batch=16",
    "loss.num_minibatches=1",
]
TINY_MLP = [
    "env.id=FakeCount-v0",
    "env.num_envs=2",
    "env.max_episode_steps=5",
    "policy.hidden_sizes=[8]",
    "collector.frames_per_batch=16",
    "loss.epochs=2",
    "eval.episodes=2",
    "eval.final_episodes=2",
    "logger.progress=none",
]


@pytest.fixture
def aten_random():
    """The compiled graphs draw with aten's random ops: the same actions as eager's."""
    with inductor_config.patch(fallback_random=True):
        yield


def _rollout_and_grads(run):
    """One rollout [8, 2] (cloned; the actions drawn from seed 0), then the loss terms and
    gradients on it."""
    torch.manual_seed(0)
    batch = run.collector.collect().clone()
    add_gae(batch, 0.98, 0.8)
    (mb,) = minibatches(batch, 1, run.algo.sampler)
    terms = run.algo.loss(mb)
    sum(v for k, v in terms.items() if k.startswith("loss_")).backward()
    grads = {n: p.grad.clone() for n, p in run.policy.named_parameters()}
    return batch, terms, grads


# the LSTM case compiles its acting step with the memory in the graph: about a minute of
# inductor on 2 cores, so it runs in the slow tier (CI runs both)
@pytest.mark.parametrize(
    "overrides",
    [pytest.param(TINY_LSTM, id="lstm", marks=pytest.mark.slow), pytest.param(TINY_MLP, id="mlp")],
)
def test_compiled_run_matches_eager_rollout_terms_and_grads(overrides, aten_random):
    """The acting step compiled (both), the loss too (the MLP; with a memory it stays eager)."""
    cfg = make_cfg(*overrides)
    eager, compiled = build(cfg), build(cfg)  # the same seed: the same parameters and envs
    compile_run(compiled)
    recurrent = bool(eager.policy.state_specs)
    assert isinstance(compiled.collector.act, Compiled)
    assert isinstance(compiled.algo.loss.forward, Compiled) is not recurrent
    b_e, t_e, g_e = _rollout_and_grads(eager)
    b_c, t_c, g_c = _rollout_and_grads(compiled)
    assert not compiled.collector.act.failed
    assert b_e[K.NEXT, K.DONE].any()  # the rollout holds resets
    torch.testing.assert_close(b_c[K.IS_INIT], b_e[K.IS_INIT])
    torch.testing.assert_close(b_c[K.ACTION], b_e[K.ACTION])
    for k in eager.policy.state_specs:  # the states, zero at each reset
        torch.testing.assert_close(b_c[k], b_e[k], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(b_c[K.NEXT, k], b_e[K.NEXT, k], rtol=1e-5, atol=1e-6)
        assert (b_c[k][b_c[K.IS_INIT].squeeze(-1)] == 0).all()
    for k in (K.SAMPLE_LOG_PROB, K.STATE_VALUE, K.ADVANTAGE):
        torch.testing.assert_close(b_c[k], b_e[k], rtol=1e-5, atol=1e-6)
    for k, v in t_e.items():
        torch.testing.assert_close(t_c[k], v, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert g_c.keys() == g_e.keys()
    for n in g_e:
        torch.testing.assert_close(g_c[n], g_e[n], rtol=1e-4, atol=1e-6, msg=n)


def test_annealed_loss_scalars_do_not_recompile():
    """The clip and entropy coefficient change at every update: read as tensors, no new graph
    (a Python float would be a constant, recompiled at each value)."""
    counter = CompileCounter()
    run = build(make_cfg(*TINY_MLP, "loss.entropy_coef=0.01"))
    compile_run(run, backend=counter)
    batch = run.collector.collect().clone()
    add_gae(batch, 0.98, 0.8)
    (mb,) = minibatches(batch, 1, run.algo.sampler)
    graphs = []
    for progress in (0.0, 0.3, 0.6):
        run.algo.loss.clip_epsilon = 0.2 * (1 - progress)
        run.algo.loss.entropy_coef = 0.01 * (1 - progress)
        terms = run.algo.loss(mb)
        eager = run.algo.loss.forward.eager(mb)
        torch.testing.assert_close(terms["loss_entropy"], eager["loss_entropy"])
        assert terms["loss_entropy"] != 0
        graphs.append(counter.frame_count)
    assert graphs == [graphs[0]] * 3 and not run.algo.loss.forward.failed


@pytest.mark.parametrize("first", [True, False], ids=["compiled-then-eager", "eager-then-compiled"])
def test_a_checkpoint_resumes_across_compile(first, tmp_path):
    """2 iterations one way, 2 more the other: the checkpoint's keys are eager's (no
    ``_orig_mod.``), and the resumed run continues to its budget."""
    run_dir = tmp_path / "run"
    fit(make_cfg(*TINY_MLP, f"compile={str(first).lower()}", "total_frames=32"), run_dir)
    policy_keys = lambda: ckpt.load(latest(run_dir))["state"]["policy"].keys()  # noqa: E731
    want = build(make_cfg(*TINY_MLP)).policy.state_dict().keys()
    assert policy_keys() == want
    summary = resume(run_dir, f"compile={str(not first).lower()}", "total_frames=64")
    assert summary["frames"] == 64
    assert policy_keys() == want


def latest(run_dir):
    return ckpt.latest(ckpt.checkpoint_dir(run_dir))


def test_a_failing_compiler_warns_once_and_runs_eagerly(capfd, console):
    def broken(gm, example_inputs):
        raise RuntimeError("no C++ compiler")

    cfg = make_cfg(*TINY_MLP)
    eager, run = build(cfg), build(cfg)
    compile_run(run, backend=broken)
    b_e, t_e, g_e = _rollout_and_grads(eager)
    b_c, t_c, g_c = _rollout_and_grads(run)
    _rollout_and_grads(run)  # later calls: eager, no more warnings
    assert run.collector.act.failed and run.algo.loss.forward.failed
    torch.testing.assert_close(b_c.exclude(K.NEXT), b_e.exclude(K.NEXT))  # eager: bit for bit
    for n in g_e:
        torch.testing.assert_close(g_c[n], g_e[n], rtol=0, atol=0)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "compile=true" in ln]
    assert len(lines) == 1 and "the acting step" in lines[0] and "eagerly" in lines[0], lines


def test_compiled_actions_are_drawn_from_the_policy_distribution():
    """Inductor draws its own random numbers (not aten's): the compiled Gumbel-max draw must
    still follow softmax(logits). 16,000 draws: each frequency within 4 standard errors."""
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, -1.0]]).expand(8, 3).contiguous()
    draw = Compiled(lambda lg: CategoricalHead.sample({K.LOGITS: lg}, True), "a draw", [])
    counts = sum(torch.bincount(draw(logits), minlength=3) for _ in range(2000))
    assert not draw.failed
    freq, p = counts / counts.sum(), logits[0].softmax(-1)
    torch.testing.assert_close(freq, p, rtol=0, atol=4 * (0.25 / 16_000) ** 0.5)


def test_a_memory_policy_is_refused_before_anything_runs():
    with pytest.raises(ConfigError, match="compile=True is invalid: compiles policies without"):
        make_cfg(*TINY_LSTM, "compile=true")
