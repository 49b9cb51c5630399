"""Dict / Tuple observations stay nested (``("observation", <entry>)``) through the env layer,
the collector (both paths), PPO minibatches and replay; images stay uint8; a CNN + LSTM policy
replays its rollout exactly (first-epoch ratio 1); text entries are left out, unencodable ones
refused with the fix; running normalisation touches float Box entries only."""

from __future__ import annotations

import pytest
import torch

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import BufferConfig, EnvConfig, PolicyConfig
from rltool.data import make_replay, minibatches
from rltool.envs import make_env
from rltool.errors import ConfigError
from rltool.losses import PPOLoss, add_gae
from rltool.modules import make_policy
from rltool.modules.encoders import ImageEncoder, _Contiguous, _conv_stack
from rltool.specs import IMAGE, Spec


def nested_env(num_envs=2, **kwargs):
    cfg = EnvConfig(id="FakeNested-v0", num_envs=num_envs, kwargs={"terminate_at": 3, **kwargs})
    return make_env(cfg)


def test_specs_of_a_dict_observation_without_its_text_entry(capsys):
    spec = nested_env().specs.observation
    assert list(spec.entries) == ["dir", "image", "pos"]  # gymnasium sorts Dict keys
    assert spec.entries["image"].dtype == torch.uint8 and spec.entries["image"].layout == "hwc"
    assert spec.entries["dir"].kind == "index" and spec.entries["dir"].n == 4
    assert spec.entries["pos"].dtype == torch.float32


def test_the_collectors_rollout_equals_a_hand_built_one():
    torch.manual_seed(0)
    env = nested_env()
    policy = make_policy(PolicyConfig(), env.specs)
    r = Collector(env, policy, 2 * 4, seed=0).collect()
    # per env: episodes of 3 steps; root step t is episode t // 3 at time t % 3
    t = torch.tensor([0, 1, 2, 0])
    k = torch.tensor([0, 0, 0, 1])
    obs = r[K.OBSERVATION]
    assert obs["pos"].dtype == torch.float32 and obs["image"].dtype == torch.uint8
    torch.testing.assert_close(obs["pos"][:, 0], torch.stack([t, k], -1).float())
    assert obs["dir"][:, 1].tolist() == (t % 4).tolist()  # Discrete(4, start=1) stored from 0
    assert torch.equal(obs["image"][:, 0], (10 * k + t).view(4, 1, 1, 1).expand(4, 6, 6, 2).byte())
    assert r[K.IS_INIT][:, 0, 0].tolist() == [True, False, False, True]
    # the true final observation where an episode ended (t = 3 of episode 0), not the reset one
    nxt = r[K.NEXT, K.OBSERVATION]
    torch.testing.assert_close(nxt["pos"][:, 0], torch.tensor([[1.0, 0], [2, 0], [3, 0], [1, 1]]))
    assert nxt["image"][2, 0, 0, 0, 0] == 3 and nxt["image"].dtype == torch.uint8
    assert "mission" not in obs


def test_both_collector_paths_give_the_same_rollout():
    env_cfg = {"multi": True}
    rollouts = []
    for use_td in (False, True):
        torch.manual_seed(0)
        env = nested_env(**env_cfg)
        policy = make_policy(PolicyConfig(kind="lstm", hidden_size=8), env.specs)
        c = Collector(env, policy, 2 * 6, seed=0, use_tensordict=use_td)
        c.collect()
        rollouts.append(c.collect().clone())
    assert (rollouts[0] == rollouts[1]).all()


def test_tuple_entries_are_named_by_their_index():
    env = make_env(EnvConfig(id="FakeTupleObs-v0", num_envs=1))
    assert list(env.specs.observation.entries) == ["0", "1"]
    env.reset_tensors(seed=0)
    obs = env.step_tensors(torch.zeros(1, dtype=torch.int64)).observation
    assert obs["0"].tolist() == [1] and obs["1"].tolist() == [[1.0]]


def test_obs_keys_picks_entries_and_refuses_text_or_unknown_names():
    env = make_env(EnvConfig(id="FakeNested-v0", num_envs=1, obs_keys=["image", "dir"]))
    assert list(env.specs.observation.entries) == ["image", "dir"]
    with pytest.raises(ConfigError, match="'mission', a text entry"):
        make_env(EnvConfig(id="FakeNested-v0", num_envs=1, obs_keys=["mission"]))
    with pytest.raises(ConfigError, match="'nope'.*choose among dir, image, mission, pos"):
        make_env(EnvConfig(id="FakeNested-v0", num_envs=1, obs_keys=["nope"]))
    with pytest.raises(ConfigError, match="env.obs_keys instead"):
        make_env(EnvConfig(id="FakeNested-v0", num_envs=1, obs_keep=[0]))
    with pytest.raises(ConfigError, match="remove env.obs_keys"):
        make_env(EnvConfig(id="CartPole-v1", num_envs=1, obs_keys=["a"]))


def test_normalisation_touches_float_box_entries_only():
    cfg = EnvConfig(id="FakeNested-v0", num_envs=2, normalize_obs=True, kwargs={"terminate_at": 3})
    env = make_env(cfg)
    obs = env.reset_tensors(seed=0)
    for _ in range(4):
        obs = env.step_tensors(torch.zeros(2, dtype=torch.int64)).observation
    assert list(env.obs_norm.state_dict()) == ["pos"]
    assert obs["image"].dtype == torch.uint8 and obs["image"].max() > 1  # raw codes
    assert obs["pos"].abs().max() < 3  # normalised (the raw time reaches 2)


@pytest.mark.parametrize("symbolic", [False, True])
def test_cnn_lstm_first_epoch_ratio_is_one_on_a_rollout_with_resets(symbolic):
    torch.manual_seed(3)
    cfg = EnvConfig(
        id="FakeNested-v0",
        num_envs=4,
        kwargs={"terminate_at": 5},
        image="symbolic" if symbolic else "pixels",
    )
    env = make_env(cfg)
    inputs = ["observation", "prev_action"]
    pcfg = PolicyConfig(kind="lstm", hidden_size=16, cnn_features=16, inputs=inputs)
    policy = make_policy(pcfg, env.specs)
    assert "image" in policy.encoder.images
    c = Collector(env, policy, 4 * 8, seed=1)
    c.collect()
    batch = add_gae(c.collect().clone(), 0.99, 0.95)
    assert batch[K.IS_INIT][1:].any() and not batch[K.IS_INIT][0].all()
    assert batch[K.OBSERVATION, "image"].dtype == torch.uint8
    loss = PPOLoss(policy)
    policy.train()
    for mb in minibatches(batch, 2, "sequences", torch.Generator().manual_seed(0)):
        assert mb[K.OBSERVATION, "image"].dtype == torch.uint8
        ev = loss.evaluate(mb)
        tol = {"atol": 1e-5, "rtol": 1e-5}
        torch.testing.assert_close(ev[K.SAMPLE_LOG_PROB], mb[K.SAMPLE_LOG_PROB], **tol)
        torch.testing.assert_close(ev[K.STATE_VALUE], mb[K.STATE_VALUE], **tol)
        assert loss(mb)["approx_kl"].abs() < 1e-6


def test_symbolic_image_is_embedded_per_channel_as_an_embedding_lookup_would():
    """The encoder picks rows with index_select (its faster backward); the features and the
    table's gradient equal nn.functional.embedding's, channel c reading rows c * 256 + code."""
    torch.manual_seed(0)
    spec = Spec(kind=IMAGE, shape=(5, 5, 3), dtype=torch.uint8, layout="hwc", symbolic=True)
    enc = ImageEncoder(spec, PolicyConfig(kind="lstm", cnn_features=8, embed_dim=4), "image")
    x = torch.randint(0, 11, (2, 6, 5, 5, 3), dtype=torch.uint8)
    out = enc(x)
    out.square().sum().backward()
    ours = enc.embed.weight.grad.clone()
    enc.zero_grad()
    codes = x.reshape(-1, 5, 5, 3).long() + torch.arange(3) * 256
    e = torch.nn.functional.embedding(codes, enc.embed.weight)  # [N, H, W, C, E]
    ref = enc.linear(enc.convs(e.flatten(-2).movedim(-1, 1))).reshape(2, 6, -1)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, atol=0, rtol=0)
    torch.testing.assert_close(ours, enc.embed.weight.grad, atol=1e-6, rtol=1e-6)
    seen = ours.abs().sum(-1) > 0
    for c in range(3):  # codes 0-10 drawn on each channel, in that channel's own rows
        assert seen[c * 256 : c * 256 + 11].all() and not seen[c * 256 + 11 : (c + 1) * 256].any()


def test_conv_stack_computes_a_plain_stack_and_keeps_its_parameter_names():
    """The last ReLU runs on a standard-layout copy (speed, on channels-last input): the same
    numbers, to the bit, as the plain conv/ReLU stack, and the parameter names of checkpoints
    written before (0, 2, 4)."""
    torch.manual_seed(0)
    stack = _conv_stack("small", 6)
    plain = torch.nn.Sequential(*[m for m in stack if not isinstance(m, _Contiguous)])
    assert [k for k, _ in stack.named_parameters()] == [
        f"{i}.{w}" for i in (0, 2, 4) for w in ("weight", "bias")
    ]
    x = torch.randn(4, 7, 7, 6).movedim(-1, 1).requires_grad_()  # channels-last, as embedded
    out = stack(x)
    (gx,) = torch.autograd.grad(out.square().sum(), x)
    ref = plain(x)
    (rx,) = torch.autograd.grad(ref.square().sum(), x)
    assert torch.equal(out, ref) and torch.equal(gx, rx)


def test_mlp_steps_sampler_keeps_entries_nested():
    env = nested_env()
    policy = make_policy(PolicyConfig(), env.specs)
    batch = Collector(env, policy, 2 * 4, seed=0).collect()
    for mb in minibatches(batch, 2, "steps", torch.Generator().manual_seed(0)):
        assert mb.shape == (4,) and mb[K.OBSERVATION, "image"].shape == (4, 6, 6, 2)


@pytest.mark.parametrize("storage", ["memory", "memmap"])
def test_replay_keeps_uint8_image_windows_and_saves_them(tmp_path, storage):
    torch.manual_seed(0)
    env = nested_env(num_envs=2)
    pcfg = PolicyConfig(kind="gru", hidden_size=8, cnn_features=8)
    policy = make_policy(pcfg, env.specs, heads=("q",))
    policy.epsilon = 0.5
    c = Collector(env, policy, 2 * 10, seed=0)
    batches = [c.collect().clone() for _ in range(3)]

    def buffer(name):
        path = str(tmp_path / name)
        cfg = BufferConfig(size=40, seq_len=6, batch_size=5, storage=storage, path=path)
        return make_replay(cfg, 1, 2, policy, seed=3)

    a = buffer("a")
    for b in batches:
        a.extend(b)
    assert a.storage[K.OBSERVATION, "image"].dtype == torch.uint8
    s = a.sample()
    assert s[K.OBSERVATION, "image"].dtype == torch.uint8 and s.shape == (6, 5)
    assert s[K.NEXT, K.OBSERVATION, "image"].dtype == torch.uint8
    a.save(tmp_path / "saved")
    b = buffer("b")
    b.load(tmp_path / "saved")
    for _ in range(2):
        assert (a.sample() == b.sample()).all()
