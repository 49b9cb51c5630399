"""The collector: episode boundaries, bootstrap values, rollout shapes. (Tensor path ==
TensorDict path: tests/test_step_paths.py.)"""

import pytest
import torch

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import EnvConfig, PolicyConfig
from rltool.envs import make_env
from rltool.modules import make_policy


def collect(use_tensordict, env_cfg, policy_cfg, batches=3, seed=0):
    torch.manual_seed(seed)
    env = make_env(env_cfg)
    policy = make_policy(policy_cfg, env.specs)
    c = Collector(env, policy, 4 * env.num_envs, seed=seed, use_tensordict=use_tensordict)
    out = [c.collect().clone() for _ in range(batches)]
    env.close()
    return out, policy


def test_no_transition_crosses_an_episode_boundary():
    cfg = EnvConfig(id="FakeCount-v0", num_envs=2, kwargs={"terminate_at": 3}, max_episode_steps=5)
    batches, _ = collect(False, cfg, PolicyConfig(), batches=2)
    td = torch.cat(batches, 0)  # [8, 2]
    obs, nxt, done = td[K.OBSERVATION], td[K.NEXT, K.OBSERVATION], td[K.NEXT, K.DONE]
    assert td[K.IS_INIT][0].all()
    for t in range(td.shape[0] - 1):
        for b in range(2):
            if done[t, b]:
                assert obs[t + 1, b, 0] == 0 and td[K.IS_INIT][t + 1, b]
                assert nxt[t, b, 1] == obs[t, b, 1]  # the final observation is the old episode's
            else:
                assert torch.equal(nxt[t, b], obs[t + 1, b]) and not td[K.IS_INIT][t + 1, b]


def test_bootstrap_values_truncation_uses_final_observation():
    # FakeCount truncates at t=3 (time limit): ("next", "state_value") there is V(final obs)
    cfg = EnvConfig(id="FakeCount-v0", num_envs=2, max_episode_steps=3)
    (td,), policy = collect(False, cfg, PolicyConfig(), batches=1)
    nv, v = td[K.NEXT, K.STATE_VALUE], td[K.STATE_VALUE]
    trunc = td[K.NEXT, K.TRUNCATED].squeeze(-1)
    assert trunc[2].all() and not trunc[:2].any()
    with torch.no_grad():
        final = policy.state_value(
            {K.OBSERVATION: td[K.NEXT, K.OBSERVATION][2]}, {}, torch.zeros(2, 1, dtype=torch.bool)
        )
    assert torch.allclose(nv[2], final)
    assert torch.equal(nv[:2], v[1:3])  # inside an episode: the value of the next step
    assert not torch.allclose(nv[2], v[3])  # not the value of the reset observation


def test_rollout_shape_and_frame_count():
    env = make_env(EnvConfig(id="CartPole-v1", num_envs=4))
    c = Collector(env, make_policy(PolicyConfig(), env.specs), 32, seed=0)
    td = c.collect()
    assert td.batch_size == torch.Size([8, 4]) and c.frames == 32
    assert td[K.ACTION].dtype == torch.int64 and td[K.NEXT, K.DONE].dtype == torch.bool
    with pytest.raises(ValueError, match="multiple"):
        Collector(env, make_policy(PolicyConfig(), env.specs), 30)
