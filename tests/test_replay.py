"""The replay buffer: windows never cross the write head or an episode start without is_init,
stored states replay exactly, prioritized sampling by hand, save/load (memory and memmap) with
identical samples, and folders holding a pickle refused before anything is run."""

import json
import pathlib
import pickle

import pytest
import torch
from tensordict import TensorDict

from rltool import keys as K
from rltool.collectors import Collector
from rltool.config import BufferConfig, EnvConfig, PolicyConfig
from rltool.data import ReplayBuffer, make_replay
from rltool.envs import make_env
from rltool.errors import UserError
from rltool.modules import make_policy
from rltool.modules.recurrent import recurrent_mode


def rollout(t0: int, T: int, B: int, episode_len) -> TensorDict:
    """Steps t0..t0+T of B columns; column b's episodes last episode_len[b] steps. observation =
    [global time, episode id]; is_init at episode starts, done at their last step."""
    t = torch.arange(t0, t0 + T).view(T, 1).expand(T, B)
    length = torch.tensor(episode_len).view(1, B)
    is_init, done = t % length == 0, (t + 1) % length == 0
    obs = torch.stack([t, t // length], -1).float()
    return TensorDict(
        {
            K.OBSERVATION: obs,
            K.IS_INIT: is_init.unsqueeze(-1),
            K.ACTION: torch.zeros(T, B, dtype=torch.int64),
            K.NEXT: {
                K.OBSERVATION: obs + 1,
                K.REWARD: torch.ones(T, B, 1),
                K.TERMINATED: done.unsqueeze(-1),
                K.TRUNCATED: torch.zeros(T, B, 1, dtype=torch.bool),
                K.DONE: done.unsqueeze(-1),
            },
        },
        [T, B],
    )


def filled(buffer: ReplayBuffer, steps: int, T: int = 7, lens=(3, 5, 11)) -> ReplayBuffer:
    for t0 in range(0, steps, T):
        buffer.extend(rollout(t0, T, len(lens), list(lens)))
    return buffer


@pytest.mark.parametrize("prioritized", [False, True])
def test_windows_are_continuous_and_reset_at_every_episode_start(prioritized):
    # 20 rows per column, 7-step rollouts: after 63 steps the ring has wrapped three times
    buf = filled(ReplayBuffer(60, 3, 6, 512, prioritized=prioritized, seed=1), 63)
    if prioritized:  # skewed priorities must not open windows across the write head either
        buf.priority.uniform_(0.1, 10.0)
    for _ in range(5):
        s = buf.sample()
        t, episode = s[K.OBSERVATION][..., 0], s[K.OBSERVATION][..., 1]
        assert (t[1:] - t[:-1]).eq(1).all()  # consecutive steps: never across the write head
        assert t.min() >= 63 - 20  # only what the ring still holds
        new_episode = episode[1:] != episode[:-1]
        assert s[K.IS_INIT][1:].squeeze(-1)[new_episode].all()  # every episode start flagged
        assert s[K.NEXT, K.DONE][:-1].squeeze(-1)[new_episode].all()
        assert s[K.MASK].all()


def test_uniform_sampling_reaches_every_valid_start_and_nothing_else():
    buf = filled(ReplayBuffer(30, 3, 4, 4000, seed=0), 14)  # 14 steps in a 10-row ring
    starts = buf.sample()[K.OBSERVATION][0, :, 0]
    assert set(starts.long().tolist()) == set(range(4, 11))  # rows 4..10 start whole windows
    counts = torch.bincount(starts.long())[4:]
    assert counts.min() > 0.7 * 4000 / 7


def test_mask_covers_the_loss_steps_after_burn_in():
    buf = filled(ReplayBuffer(60, 3, 6, 8, burn_in=2), 21)
    assert buf.sample()[K.MASK][:, 0, 0].tolist() == [False, False, True, True, True, True]
    mlp = filled(ReplayBuffer(60, 3, 3, 8, loss_steps=1), 21)  # n-step lookahead for an MLP
    assert mlp.sample()[K.MASK][:, 0, 0].tolist() == [True, False, False]


def test_prioritized_probabilities_and_weights_by_hand():
    buf = ReplayBuffer(4, 1, 1, 20000, prioritized=True, alpha=0.5, beta=1.0, seed=0)
    buf.extend(rollout(0, 4, 1, [100]))
    sample = buf.sample(4)
    sample = sample[:, :4]
    td_error = torch.tensor([[1.0, 4.0, 9.0, 16.0]])
    sample[K.INDEX][0] = torch.arange(4)
    buf.update_priorities(sample, td_error)
    torch.testing.assert_close(buf.priority.squeeze(1), torch.tensor([1.0, 4, 9, 16]) + 1e-6)
    s = buf.sample()
    prob = torch.tensor([1.0, 2, 3, 4]) / 10  # priority ** 0.5, normalised
    freq = torch.bincount(s[K.INDEX][0], minlength=4) / 20000
    torch.testing.assert_close(freq, prob, atol=0.015, rtol=0)
    weight = (prob[s[K.INDEX][0]] / prob.min()).pow(-1.0)  # (N P)^-beta / max
    torch.testing.assert_close(s[K.PRIORITY_WEIGHT][0, :, 0], weight, rtol=1e-4, atol=1e-6)


def test_sequence_priority_mixes_max_and_mean_over_the_loss_steps():
    buf = ReplayBuffer(30, 3, 4, 2, burn_in=1, prioritized=True, priority_eta=0.5)
    filled(buf, 10)
    s = buf.sample()
    err = torch.tensor([[0.0, 0.0], [1.0, -2.0], [3.0, 2.0], [-2.0, 2.0]])
    buf.update_priorities(s, err)
    start = s[K.INDEX][0]
    want = torch.tensor([0.5 * 3 + 0.5 * 2, 0.5 * 2 + 0.5 * 2]) + 1e-6
    torch.testing.assert_close(buf.priority.view(-1)[start], want)


def test_bad_sizes_are_refused():
    with pytest.raises(UserError, match="buffer.size"):
        ReplayBuffer(10, 4, 3, 1)  # 2 rows per env < a 3-step window
    buf = ReplayBuffer(30, 3, 4, 2)
    with pytest.raises(RuntimeError, match="need 4"):
        filled(buf, 3, T=3).sample()


@pytest.fixture(scope="module", params=["gru", "lstm"])
def rnn_rollouts(request):
    """A recurrent Q-policy on CartPole-with-hidden-velocities: the collector's rollouts."""
    torch.manual_seed(0)
    env = make_env(EnvConfig(num_envs=3, obs_keep=[0, 2]))
    cfg = PolicyConfig(kind=request.param, hidden_size=8)
    policy = make_policy(cfg, env.specs, heads=("q",))
    policy.epsilon = 0.5
    collector = Collector(env, policy, 3 * 16, seed=0)
    batches = [collector.collect().clone() for _ in range(6)]
    collector.close()
    return policy, batches


def test_windows_of_collected_data_replay_the_acting_q_values(rnn_rollouts):
    policy, batches = rnn_rollouts
    buf = make_replay(BufferConfig(size=3 * 40, seq_len=12, batch_size=64), 1, 3, policy, 0)
    for b in batches:
        buf.extend(b)
    s = buf.sample()
    nxt_obs, obs, init = s[K.NEXT, K.OBSERVATION], s[K.OBSERVATION], s[K.IS_INIT].squeeze(-1)
    continues = ~init[1:]
    torch.testing.assert_close(obs[1:][continues], nxt_obs[:-1][continues])  # same episode
    assert s[K.NEXT, K.DONE][:-1].squeeze(-1).eq(init[1:]).all()
    # replaying a window from its stored state reproduces what the policy computed when acting
    whole = torch.cat(batches)  # [6 * 16, 3]: every step in collection order
    # the ring holds the last 40 of 96 steps per column, the oldest (step 56) at row 96 % 40
    t = 56 + (s[K.INDEX][0] // 3 - 96 % 40) % 40 + torch.arange(12).view(12, 1)
    with torch.no_grad(), recurrent_mode("temporal"):
        q, _, _ = policy.action_values(s)
    want = whole[K.ACTION_VALUE][t, s[K.INDEX][0] % 3]
    torch.testing.assert_close(q, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["memory", "memmap"])
def test_save_load_round_trip_gives_identical_samples(tmp_path, kind, rnn_rollouts):
    policy, batches = rnn_rollouts
    cfg = BufferConfig(size=90, seq_len=8, burn_in=2, batch_size=16, prioritized=True)

    def buffer(name):
        c = BufferConfig(**{**cfg.__dict__, "storage": kind, "path": str(tmp_path / name)})
        return make_replay(c, 1, 3, policy, seed=7)

    a = buffer("live_a")
    for b in batches:
        a.extend(b)
    first = a.sample()
    a.update_priorities(first, torch.randn(8, 16))
    a.save(tmp_path / "saved")
    b = buffer("live_b")
    b.load(tmp_path / "saved")
    for _ in range(3):
        sa, sb = a.sample(), b.sample()
        assert (sa == sb).all()
        assert set(sa.keys(True, True)) == set(sb.keys(True, True))
    a.extend(batches[0])  # the loaded buffer does not share storage with the saved folder
    b.extend(batches[0])
    assert (a.sample() == b.sample()).all()
    again = buffer("live_c")
    again.load(tmp_path / "saved")  # the saved folder is untouched by b's writes
    assert again.write == (a.write - 16) % 30


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def _saved(tmp_path):
    buf = filled(ReplayBuffer(30, 3, 4, 2), 14)
    buf.save(tmp_path / "saved")
    return buf, tmp_path / "saved"


def test_a_pickle_in_a_buffer_folder_is_refused_and_not_run(tmp_path):
    buf, folder = _saved(tmp_path)
    marker = tmp_path / "pwned"
    (folder / "storage" / "evil").mkdir()
    (folder / "storage" / "evil" / "other.pickle").write_bytes(pickle.dumps(_Evil(marker)))
    meta = {"_type": "<class 'tensordict.tensorclass.NonTensorData'>", "_is_non_tensor": True}
    (folder / "storage" / "evil" / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="pickle"):
        ReplayBuffer(30, 3, 4, 2).load(folder)
    assert not marker.exists()
    pickle.loads((folder / "storage" / "evil" / "other.pickle").read_bytes())
    assert marker.exists()  # (the file really was a live pickle)


def test_non_tensor_metadata_or_layout_mismatch_is_refused(tmp_path):
    buf, folder = _saved(tmp_path)
    meta_path = folder / "storage" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta[K.ACTION]["_type"] = "<class 'tensordict.tensorclass.NonTensorData'>"
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(UserError, match="non-tensor"):
        ReplayBuffer(30, 3, 4, 2).load(folder)
    _, folder2 = _saved(tmp_path / "b")
    with pytest.raises(UserError, match="saved with"):
        ReplayBuffer(60, 3, 4, 2).load(folder2)
    with pytest.raises(UserError, match="does not exist"):
        ReplayBuffer(30, 3, 4, 2).load(tmp_path / "nothing")
