"""PPO's ``loss.bptt_horizon`` (rltool/data/context.py): a horizon within the rollout is today's
update bit for bit; the context reaches back to each episode's start and no further; gradients
reach the context's first step; the context survives a SIGKILL + resume; bad pairs are refused."""

from __future__ import annotations

import signal

import pytest
import torch
from conftest import TINY_EVAL, make_cfg, metric_rows, start_cli
from recurrent_helpers import masked_cartpole, recording_step, recurrent_policy

from rltool import keys as K
from rltool.algos.ppo.algorithm import PPO
from rltool.collectors import Collector
from rltool.data import SequenceContext
from rltool.modules.recurrent import recurrent_mode

T, B = 16, 4  # a short rollout, so that episodes cross rollouts


def _train(kind, horizon, updates=3, record=None):
    """``updates`` collect+update rounds of a seeded policy on masked CartPole; returns each
    gradient step's terms and the final parameters. ``record`` gets each loss call's input."""
    torch.manual_seed(0)
    h = "null" if horizon is None else horizon
    cfg = make_cfg(f"policy={kind}", f"loss.bptt_horizon={h}", "loss.epochs=2")
    env = masked_cartpole(B)
    policy = recurrent_policy(kind, env.specs)
    algo, opt = PPO(cfg, env, policy), torch.optim.Adam(policy.parameters(), lr=3e-3)
    collector, steps = Collector(env, policy, B * T, seed=5), []

    step = recording_step(opt, steps)

    if record is not None:
        forward = algo.loss.forward
        algo.loss.forward = lambda td: (record.append(td.clone()), forward(td))[1]
    for _ in range(updates):
        algo.update(collector.collect(), 0.0, 0, step)
    collector.close()
    return steps, torch.cat([p.detach().reshape(-1) for p in policy.parameters()]), policy


def _equal(a, b):
    return all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kind", ["lstm", "gru", "ffm"])
@pytest.mark.parametrize("horizon", [T // 2, T])
def test_a_horizon_within_the_rollout_is_bit_equal_to_none(kind, horizon):
    on, p_on, _ = _train(kind, horizon)
    off, p_off, _ = _train(kind, None)
    assert len(on) == len(off) == 6
    assert all(_equal(a, b) for a, b in zip(on, off, strict=True))
    assert torch.equal(p_on, p_off)


@pytest.mark.parametrize("kind", ["lstm", "gru", "mingru", "ffm", "trxl"])
def test_sequences_start_at_their_episode_start_and_equal_a_rollout_from_there(kind):
    """With ``episode``, each column's sequence reaches back to its running episode's first
    step; the rollout's steps score exactly as in a sequence that starts at that step."""
    seen = []
    _, _, policy = _train(kind, "episode", updates=3, record=seen)
    later = [td for td in seen if td.get(K.MASK, None) is not None]
    assert later, "no update trained through a context"
    for td in later:
        mask = td.get(K.MASK).reshape(td.shape)
        c = int((~mask[:, 0]).sum())
        assert c > 0 and not mask[:c].any() and mask[c:].all()
        is_init = td.get(K.IS_INIT).reshape(td.shape)
        with torch.no_grad(), recurrent_mode("temporal"):
            whole = policy.evaluate(td)
            for b in range(B):
                starts = is_init[: c + 1, b].nonzero().flatten()
                # the episode running at the rollout's first step began inside the context
                # (or at the rollout's first step), never before it
                assert len(starts) > 0, f"column {b}: the context misses its episode's start"
                s = int(starts[-1])
                alone = policy.evaluate(td[s:, b : b + 1])
                for key in (K.SAMPLE_LOG_PROB, K.STATE_VALUE):
                    got, want = whole[key][c:, b], alone[key][c - s :, 0]
                    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["lstm", "gru", "ffm"])
def test_gradients_reach_the_context_first_step(kind):
    """A cue at the context's first step changes the gradient of the rollout's last step."""
    torch.manual_seed(0)
    env = masked_cartpole(B)
    policy = recurrent_policy(kind, env.specs)
    collector = Collector(env, policy, B * T, seed=5)
    first, second = collector.collect().clone(), collector.collect().clone()
    collector.close()
    for td in (first, second):  # one long episode per column: nothing resets the memory
        td.get(K.IS_INIT).zero_()
    for td in (first, second):
        for k in (K.ADVANTAGE, K.VALUE_TARGET):
            td.set(k, torch.zeros_like(td.get(K.STATE_VALUE)))
    context = SequenceContext(T, [*policy.in_keys, *policy.state_specs, *_loss_keys()])
    assert context.extend(first) is first  # nothing kept yet: the rollout itself
    td = context.extend(second)
    assert td.shape[0] == 2 * T
    obs = td.get(K.OBSERVATION).clone().requires_grad_(True)
    td.set(K.OBSERVATION, obs)
    with recurrent_mode("temporal"):
        policy.evaluate(td)[K.STATE_VALUE][-1].sum().backward()
    assert obs.grad[0].abs().sum() > 0, "no gradient reached the context's first step"


def _loss_keys():
    from rltool.data.context import LOSS_KEYS

    return LOSS_KEYS


def test_the_context_keeps_the_last_steps_and_round_trips_a_state_dict():
    td = _steps(0, 5)
    ctx = SequenceContext(3, [K.IS_INIT, K.OBSERVATION])
    ctx.extend(td)
    assert ctx.steps.get(K.OBSERVATION)[:, 0, 0].tolist() == [2.0, 3.0, 4.0]
    out = ctx.extend(_steps(5, 2))
    assert out.get(K.OBSERVATION)[:, 0, 0].tolist() == [2.0, 3.0, 4.0, 5.0, 6.0]
    assert out.get(K.MASK)[:, 0, 0].tolist() == [False] * 3 + [True] * 2
    again = SequenceContext(3, [K.IS_INIT, K.OBSERVATION])
    again.load_state_dict(ctx.state_dict())
    assert torch.equal(again.steps.get(K.OBSERVATION), ctx.steps.get(K.OBSERVATION))
    fresh = SequenceContext(3, [K.IS_INIT, K.OBSERVATION])
    assert fresh.state_dict() == {}


def test_the_context_is_cut_at_the_latest_episode_start():
    ctx = SequenceContext(4, [K.IS_INIT, K.OBSERVATION])
    ctx.extend(_steps(0, 4, init_at={2: [0], 1: [1]}))  # env 0 began at step 2, env 1 at 1
    out = ctx.extend(_steps(4, 2))
    assert out.shape[0] == 2 + 3  # env 1's episode began 3 steps before the rollout
    ctx = SequenceContext(4, [K.IS_INIT, K.OBSERVATION])
    ctx.extend(_steps(0, 4, init_at={3: [0, 1]}))
    assert ctx.extend(_steps(4, 2, init_at={0: [0, 1]})).shape[0] == 2  # new episodes: none


def _steps(start, n, init_at=None):
    """[n, 2] steps whose observation is the step's index; ``is_init`` True at {t: [envs]}."""
    from tensordict import TensorDict

    obs = torch.arange(start, start + n, dtype=torch.float32).view(n, 1, 1).expand(n, 2, 1)
    is_init = torch.zeros(n, 2, 1, dtype=torch.bool)
    for t, envs in (init_at or {}).items():
        is_init[t, envs] = True
    return TensorDict({K.OBSERVATION: obs.clone(), K.IS_INIT: is_init}, [n, 2])


# ---- the CLI: resume and refusals ----
RUN = [
    "env=cartpole_pomdp",
    "policy.kind=gru",
    "policy.hidden_size=16",
    "loss.epochs=2",
    "loss.bptt_horizon=80",
    "eval.every_frames=512",
    *TINY_EVAL,
    "checkpoint.every_frames=512",
    "total_frames=1536",
]


def _rltool(*args, env=None):
    proc = start_cli("train", *args, env=env)
    _, err = proc.communicate(timeout=300)
    return proc.returncode, err


def test_a_killed_run_resumes_with_its_context_row_for_row(tmp_path):
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    code, err = _rltool(*RUN, f"hydra.run.dir={straight}")
    assert code == 0, err
    code, _ = _rltool(
        *RUN, f"hydra.run.dir={stopped}", env={"RLTOOL_CHECKPOINT_KILL": "after_temp_write@2"}
    )
    assert code == -signal.SIGKILL
    code, err = _rltool(f"resume={stopped}")
    assert code == 0, err
    assert metric_rows(stopped) == metric_rows(straight)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["policy=mlp", "loss.bptt_horizon=64"], "has no memory to train through time"),
        (["policy=gru", "loss.bptt_horizon=1000", "loss.refresh_states=true"], "choose one"),
        (["policy=gru", "loss.bptt_horizon=0"], "loss.bptt_horizon=0 is invalid"),
        (["policy=gru", "loss.bptt_horizon=often"], "loss.bptt_horizon='often' is invalid"),
        (["policy=gru", "loss.bptt_horizon=episode", "loss.bptt_episode_cap=0"], "cap"),
        (
            ["policy=gru", "loss.bptt_horizon=1000", "distributed.nproc_per_node=2"],
            "data-parallel ranks do not support",
        ),
    ],
)
def test_bad_pairs_are_one_line_exit_2_before_any_folder(args, says, tmp_path):
    run_dir = tmp_path / "run"
    code, err = _rltool("env=cartpole_pomdp", *args, f"hydra.run.dir={run_dir}")
    assert code == 2, err
    assert says in err and len(err.strip().splitlines()) == 1, err
    assert not run_dir.exists()
