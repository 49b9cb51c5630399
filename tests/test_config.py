"""Every group option and preset composes and validates; bad values fail with ConfigError."""

import contextlib
from functools import reduce
from pathlib import Path

import pytest
from conftest import ROOT, make_cfg
from omegaconf import OmegaConf

from rltool.config.store import NOT_GROUPS
from rltool.errors import ConfigError

GROUPS = sorted(
    p.name for p in (ROOT / "conf").iterdir() if p.is_dir() and p.name not in NOT_GROUPS
)
# the option config.yaml's defaults list chooses in each group ({"env": "cartpole", ...})
DEFAULTS = {
    k: v
    for entry in OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "config.yaml"))["defaults"]
    if isinstance(entry, dict)
    for k, v in entry.items()
}


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (ROOT / "conf" / group).glob("*.yaml"))


def extra_for(group: str, option: str) -> list[str]:
    if group == "tuned":  # <env>_<policy>_<loss>: settings for that combination only
        env, policy, loss = option.rsplit("_", 2)
        return [f"env={env}", f"policy={policy}", f"loss={loss}"]
    return ["env.id=CartPole-v1"] if (group, option) == ("env", "gym") else []


def option_values(group: str, option: str) -> dict[tuple[str, ...], object]:
    """Every value the option's YAML file sets, by its full key in the config."""
    path = ROOT / "conf" / group / f"{option}.yaml"
    body = OmegaConf.to_container(OmegaConf.load(path)) or {}
    body.pop("defaults", None)
    body.pop("hydra", None)  # a sweep preset's jobs (tests/test_suite.py)
    if body and "@package _global_" not in path.read_text():
        body = {group: body}

    def leaves(d, prefix=()):
        for k, v in d.items():
            yield from leaves(v, (*prefix, k)) if isinstance(v, dict) and v else [((*prefix, k), v)]

    return dict(leaves(body))


@pytest.mark.parametrize("group,option", [(g, o) for g in GROUPS for o in options(g)])
def test_every_option_composes_to_what_its_file_says(group, option):
    extra = extra_for(group, option)
    cfg = make_cfg(f"{group}={option}", *extra)
    composed = OmegaConf.to_container(OmegaConf.structured(cfg))
    given = {tuple(o.partition("=")[0].split(".")) for o in extra}
    for key, value in option_values(group, option).items():
        if key not in given:  # the command line wins over the file
            got = reduce(lambda d, k: d[k], key, composed)
            assert got == value, (
                f"{group}={option}: {'.'.join(key)}={got!r}, its file says {value!r}"
            )
    if group == "tuned":  # chosen by itself for its env x policy x loss, and only then
        assert cfg == make_cfg(*extra)
        # (a ConfigError without it: the file is what makes the combination valid)
        with contextlib.suppress(ConfigError):
            assert cfg != make_cfg(*extra, "~tuned")
    elif not extra:  # the default option changes nothing, any other changes something
        assert (cfg == make_cfg()) == (DEFAULTS.get(group) == option), DEFAULTS


def test_presets_change_what_they_say():
    cfg = make_cfg("experiment=pendulum_ppo")
    assert cfg.env.id == "Pendulum-v1" and cfg.loss.gamma == 0.95


def test_tuned_settings_apply_to_their_env_policy_loss_only():
    for kind, lam in (("lstm", 0.8), ("gru", 0.95)):  # tuned/cartpole_pomdp_<kind>_ppo.yaml
        loss = make_cfg("env=cartpole_pomdp", f"policy={kind}").loss
        assert (loss.gamma, loss.gae_lambda, loss.entropy_coef) == (0.99, lam, 0.01)
    lstm = make_cfg("env=cartpole_pomdp", "policy=lstm")
    for kind in ("mingru", "ffm"):  # the LSTM's recipe, through its file as a default
        cfg = make_cfg("env=cartpole_pomdp", f"policy={kind}")
        assert (cfg.loss, cfg.collector, cfg.optim) == (lstm.loss, lstm.collector, lstm.optim)
    mlp = make_cfg("env=cartpole_pomdp", "policy=mlp").loss
    assert (mlp.gamma, mlp.entropy_coef) == (0.98, 0.0)
    assert make_cfg("env=cartpole", "policy=lstm").loss.entropy_coef == 0.0
    gru_dqn = make_cfg("env=cartpole_pomdp", "policy=gru", "loss=dqn")
    assert (gru_dqn.loss.n_steps, gru_dqn.buffer.seq_len, gru_dqn.policy.inputs) == (
        3,
        20,
        ["observation", "prev_action"],
    )
    assert make_cfg("experiment=cartpole_pomdp_gru_dqn") == gru_dqn  # the shortcut, no more
    assert make_cfg("env=cartpole_pomdp", "policy=lstm", "loss=dqn").buffer.burn_in == 0
    assert make_cfg("env=cartpole", "policy=gru").loss.gamma == 0.98
    assert make_cfg("env=cartpole_pomdp", "policy=gru", "loss.gamma=0.9").loss.gamma == 0.9
    assert make_cfg("env=cartpole_pomdp", "policy=gru", "~tuned").loss.gamma == 0.98


def test_defaults_are_rl_zoo_cartpole_ppo():
    cfg = make_cfg()
    assert (cfg.env.id, cfg.env.num_envs, cfg.collector.frames_per_batch) == ("CartPole-v1", 8, 256)
    assert (cfg.loss.epochs, cfg.loss.gamma, cfg.loss.gae_lambda) == (20, 0.98, 0.8)


@pytest.mark.parametrize(
    "override,match",
    [
        ("policy.hidden_sizes=[-1]", "policy.hidden_sizes"),
        ("optim.lr=-1", "optim.lr"),
        ("loss.gamma=1.5", "loss.gamma"),
        ("loss.reduction=avg", "loss.reduction"),
        ("loss.target_kl=0", "loss.target_kl"),
        ("policy.dueling=true", "policy.dueling"),
        ("env.num_envs=0", "env.num_envs"),
        ("env.num_envs=3", "frames_per_batch"),
        ("env.backend=threads", "env.backend"),
        ("+foo=1", "unknown config key 'foo'"),
        # refused before anything runs, not in the first update or backward()
        ("loss.reduction=none", "a training step needs a scalar loss"),
        ("policy=lstm loss.num_minibatches=3", "divide the 8 env columns"),
        ("policy=lstm loss.num_minibatches=16", "divide the 8 env columns"),
        ("policy=lstm loss.sampler=steps", "cannot carry a recurrent state"),
        ("loss.num_minibatches=3", "divide the 256 frames"),
        ("loss.sampler=sequences loss.num_minibatches=5", "divide the 8 env columns"),
        ("loss.refresh_states=true", "policy.kind=mlp has none"),
    ],
)
def test_bad_values_are_config_errors(override, match):
    with pytest.raises(ConfigError, match=match):
        make_cfg(*override.split())


def test_conf_dir_is_the_top_level_conf_in_a_checkout():
    from rltool.config.store import conf_dir

    assert Path(conf_dir()) == ROOT / "conf"


@pytest.mark.parametrize(
    "override",
    [
        "loss.reduction=none",
        "policy=lstm loss.num_minibatches=3",
        "loss=dqn policy=lstm loss.refresh_states=true",  # a PPO key: DQN has no such option
        "seed=18446744073709551616",  # once numpy's ValueError in seeding: exit 70
    ],
    ids=str,
)
def test_refusals_come_before_anything_runs(tmp_path, cli, override):
    """Once an internal error in backward() / a refusal inside the first update: now one line,
    exit 2, and no run folder left behind."""
    run_dir = tmp_path / "run"
    r = cli("train", *override.split(), f"hydra.run.dir={run_dir}", cwd=tmp_path)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not run_dir.exists()
