"""One source for every default: the schemas' defaults are the values ``rltool train`` runs, and an
algorithm's option changes only what an algorithm may change (every option of every group composing
to what its file says: tests/test_config.py)."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

import rltool
from rltool import algos, memories
from rltool.config import Config
from rltool.config.store import SCHEMAS, flatten, options
from rltool.errors import ConfigError


def schema_config(loss) -> Config:
    """The config built from the schemas' defaults alone, with ``loss``'s."""
    return Config(loss=loss, **{group: schema() for group, schema in SCHEMAS.items()})


def as_dict(cfg) -> dict:
    return OmegaConf.to_container(OmegaConf.structured(cfg))


def test_the_default_run_is_the_schemas_defaults():
    composed = rltool.compose()
    assert composed == schema_config(algos.get("ppo").config())


@pytest.mark.parametrize("name", [a.name for a in algos.specs()])
def test_an_algorithms_option_sets_no_loss_value_of_its_own(name):
    """``loss=<name>`` composes exactly the schema's loss defaults (no second copy in YAML)."""
    assert rltool.compose(f"loss={name}").loss == algos.get(name).config()


# what an algorithm's option may set outside loss.*: the rest belongs to conf/tuned/
ALGO_MAY_SET = ("loss", "buffer", "collector.frames_per_batch")


@pytest.mark.parametrize("name", [a.name for a in algos.specs()])
def test_an_algorithms_option_changes_no_policy_env_optimizer_or_budget(name):
    base = as_dict(rltool.compose("~tuned"))
    other = as_dict(rltool.compose(f"loss={name}", "~tuned"))
    changed = [k for k in flatten(base) if flatten(base)[k] != flatten(other).get(k)]
    assert [k for k in changed if not k.startswith(ALGO_MAY_SET)] == []


def test_loss_dqn_keeps_the_memorys_own_head():
    lstm = rltool.compose("env=cartpole_pomdp", "policy=lstm")
    dqn = rltool.compose("env=cartpole_pomdp", "policy=lstm", "loss=dqn")
    assert dqn.policy == lstm.policy
    assert dqn.policy.hidden_sizes == [64]
    assert not dqn.env.normalize_obs and not dqn.env.normalize_reward  # the tuned file's


def test_compose_refuses_like_train():
    with pytest.raises(ConfigError, match="loss.reduction"):
        rltool.compose("loss.reduction=none")


def test_the_schemas_have_no_field_without_a_default():
    """Python users build any group from its schema alone (``EnvConfig()``, ``PPOConfig()``)."""
    schemas = [*SCHEMAS.values(), *(a.config for a in algos.specs())]
    for schema in schemas:
        for f in dataclasses.fields(schema):
            assert f.default is not dataclasses.MISSING or (
                f.default_factory is not dataclasses.MISSING
            ), f"{schema.__name__}.{f.name}"


@pytest.mark.parametrize("name", [s.name for s in memories.specs() if s.name in options("policy")])
def test_a_memorys_option_lists_its_schemas_defaults(name):
    """``policy=<kind>`` sets ``policy.memory`` to the memory's schema defaults, key for key."""
    assert rltool.compose(f"policy={name}").policy.memory == memories.get(name).config()
