"""``rltool export``: every memory (and the MLP) exported to ONNX and to a ``torch.export``
program, then driven side by side with ``rltool.load_policy`` over episodes with resets (several
envs ending at different steps): the same actions at every step, the same states to 1e-5. A Dict
observation with an image, MultiDiscrete actions and previous action / reward inputs; the deploy
page's ONNX runner run with onnxruntime and no torch; bad input refused in one line, no file
left."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import numpy as np
import onnx  # rltool[export], in the test extra: a missing one fails, never skips
import onnxruntime as ort
import pytest
import torch
from conftest import ROOT, cli_env

import rltool
from rltool.cli import main
from rltool.deploy.export import METADATA, export_policy
from rltool.errors import UserError

TINY = [
    "total_frames=512",
    "policy.hidden_size=8",
    "eval.episodes=1",
    "eval.final_episodes=1",
    "logger.progress=none",
    "collector.frames_per_batch=256",
]
MEMORIES = ["mlp", "lstm", "gru", "mingru", "ffm", "trxl"]
NESTED = [
    "env=gym",
    "env.id=fake_envs:FakeNested-v0",
    "+env.kwargs={multi:true,terminate_at:6}",
    "env.max_episode_steps=5",
    "env.num_envs=2",
    "env.normalize_obs=true",
    "policy.cnn_features=8",
    "policy.inputs=[observation,prev_action,prev_reward]",
]


def _train(root, *overrides) -> str:
    run = root / "run"
    rltool.fit(rltool.compose(*overrides, *TINY), run)
    return str(run)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``trained(kind)``: a tiny cartpole_pomdp run of that memory, trained once per module."""
    runs: dict[str, str] = {}

    def get(kind: str) -> str:
        if kind not in runs:
            extra = ["policy.memory.heads=2", "policy.memory.window=4"] if kind == "trxl" else []
            root = tmp_path_factory.mktemp(kind)
            runs[kind] = _train(root, "env=cartpole_pomdp", f"policy={kind}", *extra)
        return runs[kind]

    return get


@pytest.fixture(params=MEMORIES)
def cartpole_run(request, trained):
    return request.param, trained(request.param)


@pytest.fixture(scope="module")
def nested_run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("nested"), *NESTED, "policy=gru")


def _onnx_step(path):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    def step(feed):
        out = session.run(None, {k: np.asarray(v) for k, v in feed.items()})
        return dict(zip(names, out, strict=True))

    return step


def _pt2_step(path):
    module = torch.export.load(str(path)).module()

    @torch.no_grad()
    def step(feed):
        out = module({k: torch.as_tensor(np.asarray(v)) for k, v in feed.items()})
        return {k: v.numpy() for k, v in out.items()}

    return step


def _stack(observations):
    if isinstance(observations[0], dict):
        return {k: np.stack([o[k] for o in observations]) for k in observations[0]}
    return np.stack(observations)


def _feed_obs(contract, obs):
    """The exported file's observation inputs from a batch of raw observations."""
    feed = {}
    for row in contract["inputs"]:
        name = row["name"]
        if name == "observation":
            feed[name] = obs.astype(row["dtype"])
        elif name.startswith("observation."):
            feed[name] = np.asarray(obs[name.split(".", 1)[1]]).astype(row["dtype"])
    return feed


def drive(run, path, step, makes, steps=40):
    """load_policy and the exported ``step`` over the same episodes; returns the episode count."""
    contract = json.loads(_meta(path))
    policy, _ = rltool.load_policy(run)
    envs = [make() for make in makes]
    n = len(envs)
    obs = [e.reset(seed=i)[0] for i, e in enumerate(envs)]
    ref = policy.initial_state(n)
    state = {k: v.numpy() for k, v in ref.items()}  # the file's state: carried, never zeroed
    is_init, reward, episodes = np.ones((n, 1), bool), np.zeros((n, 1), np.float32), 0
    uses_reward = "prev_reward" in state
    for _ in range(steps):
        batch = _stack(obs)
        action, ref = policy(batch, ref, reward=reward if uses_reward else None)
        feed = {**_feed_obs(contract, batch), **state, "is_init": is_init}
        if uses_reward:
            feed["prev_reward"] = reward
        out = step(feed)
        np.testing.assert_array_equal(out["action"], action)
        for k, v in ref.items():
            if k == "prev_reward":
                continue
            got = out[f"next_{k}"]
            np.testing.assert_allclose(got, v.numpy(), rtol=1e-5, atol=1e-5, err_msg=k)
            state[k] = got
        is_init = np.zeros((n, 1), bool)
        for i, env in enumerate(envs):
            obs[i], r, term, trunc, _ = env.step(action[i])
            reward[i] = r
            if term or trunc:  # a new episode: load_policy's state zeroed, the file's flagged
                obs[i], episodes = env.reset()[0], episodes + 1
                is_init[i], reward[i] = True, 0.0
                for v in ref.values():
                    v[i] = 0
    return episodes


def _meta(path) -> str:
    if str(path).endswith(".onnx"):
        props = onnx.load(str(path)).metadata_props
        return next(p.value for p in props if p.key == METADATA)
    extra = {f"{METADATA}.json": ""}
    torch.export.load(str(path), extra_files=extra)
    return extra[f"{METADATA}.json"]


def _cartpoles(n=3):
    return [lambda: gym.make("CartPole-v1", max_episode_steps=12)] * n


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_every_memory_exports_and_matches_load_policy(cartpole_run, fmt, tmp_path):
    kind, run = cartpole_run
    path = export_policy(run, fmt, out=tmp_path / f"policy.{fmt}")
    step = _onnx_step(path) if fmt == "onnx" else _pt2_step(path)
    assert drive(run, path, step, _cartpoles()) >= 3, kind
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"policy.{fmt}"]  # no temp file left
    names = [r["name"] for r in json.loads(_meta(path))["inputs"]]
    assert names[0] == "observation" and names[-1] == "is_init"


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_dict_image_observation_prev_inputs_and_multidiscrete(nested_run, fmt, tmp_path):
    path = export_policy(nested_run, fmt, out=tmp_path / f"p.{fmt}", full=True)
    step = _onnx_step(path) if fmt == "onnx" else _pt2_step(path)
    makes = [
        lambda t=t: gym.make("fake_envs:FakeNested-v0", multi=True, terminate_at=t)
        for t in (3, 4, 6)
    ]
    assert drive(nested_run, path, step, makes, steps=20) >= 5
    meta = json.loads(_meta(path))
    names = [r["name"] for r in meta["inputs"]]
    assert sorted(names[:3]) == ["observation.dir", "observation.image", "observation.pos"]
    assert {"prev_action", "prev_reward", "is_init"} <= set(names)
    outs = [r["name"] for r in meta["outputs"]]
    assert {"action", "next_prev_action", "logits", "state_value"} <= set(outs)


DEPLOY_PAGE = ROOT / "docs" / "how-to" / "deploy-a-policy.md"
NO_TORCH = """import sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'torch': raise ImportError('torch imported')
sys.meta_path.insert(0, NoTorch())
"""


def page_runner() -> str:
    """The ONNX runner of the deploy page: the python block after its ``onnx-runner`` mark."""
    after = DEPLOY_PAGE.read_text().split("<!-- onnx-runner:", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_deploy_pages_onnx_runner_runs_without_torch_as_load_policy_acts(trained, tmp_path):
    """The page's runner, run as written (its file name aside) with torch not importable, plays
    its episodes; its policy, given the observations of a seeded episode, picks the actions
    ``rltool.load_policy`` picks."""
    run = trained("lstm")
    path = tmp_path / "lstm.onnx"
    assert main(["export", f"run={run}", "format=onnx", f"out={path}"]) == 0
    code = page_runner().replace('"lstm.onnx"', repr(str(path)))
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=7)
    observations = [obs.tolist()]
    for _ in range(30):
        obs, _, terminated, truncated, _ = env.step(int(env.action_space.sample()))
        if terminated or truncated:
            break
        observations.append(obs.tolist())
    check = (
        "policy.reset()\n"
        f"print('actions', [policy(o) for o in {observations!r}])\n"
        "assert not any(m.split('.')[0] == 'torch' for m in sys.modules)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", NO_TORCH + code + check],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("episode") == 5, r.stdout
    onnx_actions = json.loads(r.stdout.split("actions ", 1)[1])
    policy, state = rltool.load_policy(run)
    actions = []
    for o in observations:
        action, state = policy(np.asarray(o, np.float32), state)
        actions.append(int(action))
    assert onnx_actions == actions


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["export", f"run={tmp_path / 'nope'}", "format=onnx"]) == 2
    assert "no such folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["export", f"run={tmp_path / 'empty'}"]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err
    assert main(["export", f"run={tmp_path}", "format=tflite"]) == 2
    err = capsys.readouterr().err
    assert "format='tflite' is invalid" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(UserError, match="no folder"):
        export_policy(tmp_path, "pt2", out=tmp_path / "nope" / "p.pt2")


def test_a_step_that_cannot_be_exported_is_refused_and_leaves_no_file(
    trained, tmp_path, monkeypatch
):
    run = trained("gru")
    from rltool.modules.recurrent import GRUModule

    step = GRUModule._step

    def branching(self, x, states, reset):  # data-dependent control flow: not traceable
        if bool(reset.any()):
            states = [s * 0 for s in states]
        return step(self, x, states, reset)

    monkeypatch.setattr(GRUModule, "_step", branching)
    for fmt in ("onnx", "pt2"):
        with pytest.raises(UserError, match="cannot export policy.kind=gru") as e:
            export_policy(run, fmt, out=tmp_path / f"p.{fmt}")
        assert "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_package_names_the_extra(trained, tmp_path, monkeypatch):
    run = trained("mlp")
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # import onnxscript -> ImportError
    with pytest.raises(UserError, match=r"pip install 'rltool\[export\]'"):
        export_policy(run, "onnx", out=tmp_path / "p.onnx")
    assert list(tmp_path.iterdir()) == []


def test_a_pt2_file_loads_and_runs_without_rltool(trained, tmp_path):
    run = trained("lstm")
    path = export_policy(run, "pt2", out=tmp_path / "p.pt2")
    code = (
        "import sys, json, torch\n"
        "class NoRltool:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'rltool': raise ImportError('rltool imported')\n"
        "sys.meta_path.insert(0, NoRltool())\n"
        "extra = {'rltool.json': ''}\n"
        f"step = torch.export.load({str(path)!r}, extra_files=extra).module()\n"
        "inputs = json.loads(extra['rltool.json'])['inputs']\n"
        "feed = {i['name']: torch.zeros([5, *i['shape'][1:]], dtype=getattr(torch, i['dtype']))"
        " for i in inputs}\n"
        "with torch.no_grad():\n"
        "    out = step(feed)\n"
        "print(tuple(out['action'].shape), tuple(out['next_recurrent_state_h'].shape))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "(5,) (5, 1, 8)"
