"""Slow learning checks (pytest -m slow): DQN's presets reach the issue's final eval returns.

`rltool train env=cartpole policy=mlp loss=dqn` >= 475 (loss=dqn brings its settings) and
`env=cartpole_pomdp policy=gru loss=dqn` (conf/tuned/cartpole_pomdp_gru_dqn.yaml brings its
settings) >= 300 on each of three seeds. Minutes each on one core (the recurrent one ~10-25).

The recurrent preset's goal is a population's, >= 400 on 18 of 20 seeds (docs/results/dqn.md:
19 of 20, its lowest 324.8), so one seed below 400 is within it: a per-seed test can only hold
each seed to a floor the population meets. Seed 1 ends at 379.6 on the 2-core dev machine (a
fresh-clone CI run and a plain `rltool train ... seed=1`, 2026-12-07: the same figure), and above
400 in CI with the same code (2026-12-06): a run repeats exactly on one machine, while
another machine's float kernels (CPU, library builds) can part its trajectory over thousands
of updates."""

import pytest
from hydra import compose, initialize_config_dir

from rltool.config.store import conf_dir, to_config
from rltool.train import train


def run(tmp_path, *overrides):
    with initialize_config_dir(conf_dir(), version_base="1.3"):
        cfg = to_config(compose("config", ["logger.progress=none", *overrides]))
    return train(cfg, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(1200)  # a 50k-frame run: ~3 min on a free core, more beside others
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dqn_mlp_solves_cartpole(tmp_path, seed):
    summary = run(tmp_path, "env=cartpole", "policy=mlp", "loss=dqn", f"seed={seed}")
    assert summary["eval/return_mean"] >= 475, summary


@pytest.mark.slow
@pytest.mark.timeout(3600)  # a 90k-frame recurrent run: ~10-25 min on one core
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recurrent_dqn_solves_cartpole_without_velocities(tmp_path, seed):
    summary = run(
        tmp_path,
        "env=cartpole_pomdp",
        "policy=gru",
        "loss=dqn",
        f"seed={seed}",
    )
    assert summary["eval/return_mean"] >= 300, summary
