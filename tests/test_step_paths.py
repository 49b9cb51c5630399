"""The paths of the one policy step agree: the collector's tensor path (``policy.step``), its
TensorDict path (``policy(td)``), ``load_policy``'s :class:`LoadedPolicy` and the exported module
(:class:`PolicyStep`, eager), over MLP and every memory, discrete and continuous actions,
previous action / reward inputs, shared torsos and a user's memory with nested state; and
``load_policy`` / export build no env for a checkpoint that holds the env's record.

Merged here: the tensor == TensorDict rollout tests of test_collector.py (MLP, three envs),
test_collector_speedpath.py (six recurrent policies, three envs) and test_collector_state.py
(three memories on masked CartPole, shared or not)."""

from __future__ import annotations

import shutil

import gymnasium as gym
import numpy as np
import pytest
import torch
from recurrent_helpers import masked_cartpole, recurrent_policy

import rltool
from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.deploy.export import NEXT, PolicyStep
from rltool.deploy.inference import LoadedPolicy, Restored, restore
from rltool.envs import make_env
from rltool.envs.spaces import ActionMap
from rltool.envs.vector import VectorEnv
from rltool.modules import make_policy
from rltool.run import checkpoint as ckpt
from rltool.specs import Spec

ENVS = {
    "cartpole": EnvConfig(id="CartPole-v1", num_envs=3),
    "terminate": EnvConfig(
        id="FakeCount-v0", num_envs=2, kwargs={"terminate_at": 3}, max_episode_steps=5
    ),
    "truncate-continuous": EnvConfig(
        id="FakeCount-v0", num_envs=2, kwargs={"continuous": True}, max_episode_steps=3
    ),
}
POLICIES = {
    "mlp": PolicyConfig(),
    "lstm": PolicyConfig(kind="lstm", hidden_size=16),
    "gru-inputs": PolicyConfig(
        kind="gru", hidden_size=16, inputs=["observation", "prev_action", "prev_reward"]
    ),
    "lstm2-shared": PolicyConfig(kind="lstm", hidden_size=8, num_layers=2, shared_torso=True),
    "mingru2": PolicyConfig(kind="mingru", hidden_size=8, num_layers=2),
    "ffm-inputs": PolicyConfig(kind="ffm", hidden_size=8, inputs=["observation", "prev_action"]),
    "trxl-shared": PolicyConfig(
        kind="trxl", hidden_size=8, memory={"window": 3}, shared_torso=True
    ),
}
MASKED = EnvConfig(num_envs=4, obs_keep=[0, 2])  # masked_cartpole's config
# (env, policy): every policy on the gym envs (4 steps x 3 rollouts), and LSTM / GRU / a user's
# memory ("sum", nested int64 / float64 state) on masked CartPole (25 steps x 2 rollouts)
CASES = [(e, p) for p in POLICIES for e in ENVS] + [
    ("masked", f"{kind}{'-shared' * shared}")
    for kind in ("lstm", "gru", "sum")
    for shared in (0, 1)
]


def _setup(env_name: str, policy_name: str):
    """(env config, a fresh env, a fresh seeded policy, frames per batch, batches, seed)."""
    if env_name == "masked":
        env = masked_cartpole(4)
        kind, shared = policy_name.removesuffix("-shared"), policy_name.endswith("-shared")
        return MASKED, env, recurrent_policy(kind, env.specs, shared=shared), 4 * 25, 2, 3
    cfg = ENVS[env_name]
    torch.manual_seed(0)
    env = make_env(cfg)
    return cfg, env, make_policy(POLICIES[policy_name], env.specs), 4 * env.num_envs, 3, 0


def _collect(case, use_tensordict: bool, explore: bool = True):
    """Clones of the case's consecutive rollouts, the policy and the env's config and record."""
    cfg, env, policy, fpb, batches, seed = _setup(*case)
    policy.explore = explore
    torch.manual_seed(123 if case[0] == "masked" else seed)  # the action samples
    c = Collector(env, policy, fpb, seed=seed, use_tensordict=use_tensordict)
    try:
        return [c.collect().clone() for _ in range(batches)], policy, cfg, env.record
    finally:
        c.close()


def _leaves(td) -> dict:
    return {k: td.get(k) for k in td.keys(include_nested=True, leaves_only=True)}


def _raw(obs: torch.Tensor, cfg: EnvConfig, record) -> np.ndarray:
    """Raw env observations that convert to ``obs`` [B, ...] (the kept columns of obs_keep)."""
    if cfg.obs_keep is None:
        return obs.numpy()
    raw = np.zeros((obs.shape[0], *record.observation_space.shape), np.float32)
    raw[:, cfg.obs_keep] = obs.numpy()
    return raw


def _deployed(policy, cfg: EnvConfig, record):
    """LoadedPolicy and the exported step of ``policy``, as load_policy / export build them."""
    policy.eval()
    restored = Restored(cfg, PolicyConfig(), {}, policy, None, 0, "-", record)
    return LoadedPolicy(restored), PolicyStep(restored).eval()


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_every_path_of_the_step_agrees(case):
    # the collector: tensor path == TensorDict path, every leaf of every rollout (exploring)
    fast, _, _, _ = _collect(case, use_tensordict=False)
    slow, _, _, _ = _collect(case, use_tensordict=True)
    for f, s in zip(fast, slow, strict=True):
        lf, ls = _leaves(f), _leaves(s)
        assert lf.keys() == ls.keys()
        for k in lf:
            assert torch.equal(lf[k], ls[k]), k
    # load_policy and the exported step replay a greedy rollout step by step: the same env
    # actions and next states (the exported one from is_init, load_policy from zeroed states)
    rollouts, policy, cfg, record = _collect(case, use_tensordict=False, explore=False)
    loaded, exported = _deployed(policy, cfg, record)
    # the file's inputs are named by strings: a user's memory with nested state keys is not
    # exported (rltool export names its state inputs), load_policy still runs it
    exportable = all(isinstance(k, str) for k in policy.state_specs)
    with torch.no_grad():
        for td in rollouts:
            for t in range(td.shape[0]):
                _replay_step(td[t], cfg, record, loaded, exported if exportable else None)


def _replay_step(td, cfg: EnvConfig, record, loaded, exported) -> None:
    """One stored step [B] through load_policy's and the exported step: the same env action
    as the collector's, the same next state and previous action."""
    policy = loaded.module
    states, inputs = list(policy.state_specs), list(policy.input_specs)
    raw = _raw(td[K.OBSERVATION], cfg, record)
    carried = {k: td[k] for k in (*states, *inputs)}
    want = record.action_map()(td[K.ACTION])
    action, nxt = loaded(raw, carried)
    outs = [(torch.as_tensor(action), nxt)]
    if exported is not None:
        out = exported({K.OBSERVATION: torch.as_tensor(raw), **carried, K.IS_INIT: td[K.IS_INIT]})
        outs.append((out["action"], {k.removeprefix(NEXT): v for k, v in out.items()}))
    for got, after in outs:
        assert torch.equal(got, want)
        for k in states:
            assert torch.equal(after[k], td[K.nxt(k)]), k
        if K.PREV_ACTION in inputs:
            assert torch.equal(after[K.PREV_ACTION], td[K.ACTION])


def test_action_map_and_its_inverse():
    discrete = ActionMap(Spec((), torch.int64, n=3, low=(2.0,)))
    a = torch.tensor([0, 1, 2])
    assert torch.equal(discrete(a), a + 2) and torch.equal(discrete.inverse(discrete(a)), a)
    multi = ActionMap(Spec((2,), torch.int64, nvec=(3, 4), low=(1.0, -1.0)))
    m = torch.tensor([[0, 0], [2, 3]])
    assert torch.equal(multi(m), m + torch.tensor([1, -1]))
    assert torch.equal(multi.inverse(multi(m)), m)
    plain = ActionMap(Spec((), torch.int64, n=3, low=(0.0,)))
    assert plain(a) is a  # no start: no op
    box = ActionMap(Spec((2,), low=(-1.0, 0.0), high=(1.0, 0.5)))
    x = torch.tensor([[-3.0, 0.25], [0.5, 9.0]])
    assert torch.equal(box(x), torch.tensor([[-1.0, 0.25], [0.5, 0.5]]))
    inside = box(x)
    assert torch.equal(box(box.inverse(inside)), inside)


@pytest.fixture(scope="module")
def memory_run(tmp_path_factory):
    """A tiny LSTM run with previous action / reward inputs (its checkpoint holds the record)."""
    run = tmp_path_factory.mktemp("step") / "run"
    overrides = ["env=cartpole_pomdp", "policy=lstm", "policy.hidden_size=8", "total_frames=256"]
    overrides += ["collector.frames_per_batch=256", "eval.episodes=1", "eval.final_episodes=1"]
    overrides += ["logger.progress=none", "policy.inputs=[observation,prev_action,prev_reward]"]
    rltool.fit(rltool.compose(*overrides), run)
    return run


def _play(policy, state, steps=6):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    actions, reward = [], None
    for _ in range(steps):
        action, state = policy(obs, state, reward)
        actions.append(int(action))
        obs, reward, *_ = env.step(int(action))
    return actions, state


def test_load_policy_and_export_of_a_new_checkpoint_build_no_env(memory_run, monkeypatch):
    body = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(memory_run)))
    assert body["env"]["observation_space"]["type"] == "Box"  # the record, plain containers

    def no_env(*args, **kwargs):
        raise AssertionError("an env was built")

    monkeypatch.setattr(VectorEnv, "__init__", no_env)
    actions, state = _play(*rltool.load_policy(memory_run))
    step = PolicyStep(restore(memory_run))
    out = step(step.inputs(2))
    assert out["action"].shape == (2,)
    # an older checkpoint (no record): its record comes from a throwaway env, as before
    monkeypatch.undo()
    old = memory_run.parent / "old"
    shutil.copytree(memory_run, old)
    path = ckpt.latest(ckpt.checkpoint_dir(old))
    del body["env"]
    torch.save(body, path)
    assert restore(old).record.specs == restore(memory_run).record.specs
    old_actions, old_state = _play(*rltool.load_policy(old))
    assert actions == old_actions and state.keys() == old_state.keys()
    for k, v in state.items():
        assert torch.equal(v, old_state[k]), k
