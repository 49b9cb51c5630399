"""The valid values declared beside each config key: the one checker refuses a value outside them
with one line naming the key, every default is inside them, :func:`valid_values` lists them for
other code, and the seeds a run derives stay within what numpy and torch accept."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import make_cfg

from rltool import algos, memories
from rltool.config import (
    SEED_LIMIT,
    CheckpointConfig,
    Config,
    EvalConfig,
    Valid,
    WandbLoggerConfig,
    ranged,
    valid_values,
)
from rltool.config.store import SCHEMAS
from rltool.errors import ConfigError

# every schema that declares keys, with the prefix of its keys in the config
SCHEMA_KEYS = [
    *[(cls, group) for group, cls in SCHEMAS.items()],
    (EvalConfig, "eval"),
    (CheckpointConfig, "checkpoint"),
    (WandbLoggerConfig, "logger.wandb"),
    *[(a.config, "loss") for a in algos.specs()],
    *[(m.config, "policy.memory") for m in memories.specs()],
]


def outside(valid: Valid):
    """A value ``valid`` refuses: not a choice, or just past a bound."""
    if valid.choices is not None:
        bad = "not-a-choice"
    elif valid.ge is not None or valid.gt is not None:
        bad = valid.ge - 1 if valid.ge is not None else valid.gt
    elif valid.le is not None or valid.lt is not None:
        bad = valid.le + 1 if valid.le is not None else valid.lt
    else:  # finite only
        bad = float("nan")
    return [bad] if valid.each else bad


def declared():
    for cls, group in SCHEMA_KEYS:
        for name, valid in valid_values(cls).items():
            yield pytest.param(cls, group, name, valid, id=f"{group}.{name}@{cls.__name__}")


@pytest.mark.parametrize("cls,group,name,valid", declared())
def test_a_value_outside_a_declared_range_is_one_line_naming_key_value_and_range(
    cls, group, name, valid
):
    bad = outside(valid)
    with pytest.raises(ConfigError) as e:
        cls(**{name: bad})
    assert str(e.value) == f"{group}.{name}={bad!r} is invalid: {valid.text()}"
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("cls,group,name,valid", declared())
def test_every_default_is_valid(cls, group, name, valid):
    field = {f.name: f for f in dataclasses.fields(cls)}[name]
    default = field.default_factory() if field.default is dataclasses.MISSING else field.default
    assert valid.accepts(default)


def test_valid_values_lists_each_keys_range_or_choices():
    env = valid_values(SCHEMAS["env"])
    assert env["num_envs"] == Valid(ge=1) and env["backend"].choices == ("sync", "async", "envpool")
    assert env["max_episode_steps"].null and not env["num_envs"].null
    assert "id" not in env  # checked in code only (not a range or a choice)
    assert valid_values(algos.get("ppo").config)["gamma"].text() == "must be in [0, 1]"
    seed = valid_values(Config)["seed"]
    assert (seed.ge, seed.lt, seed.choices) == (0, SEED_LIMIT, None)


@pytest.mark.parametrize(
    "valid,value,ok",
    [
        (Valid(gt=0, le=1), 1.0, True),
        (Valid(gt=0, le=1), 0.0, False),
        (Valid(ge=0, lt=4), 4, False),
        (Valid(finite=True), float("inf"), False),
        (Valid(ge=1, null=True), None, True),
        (Valid(gt=0, null="off"), None, True),
        (Valid(ge=1), None, False),
        (Valid(ge=1, each=True), [1, 2, 0], False),
        (Valid(choices=("a", "b"), each=True), ["a", "b"], True),
    ],
)
def test_valid_accepts_what_its_text_says(valid, value, ok):
    assert valid.accepts(value) is ok


def test_texts_say_the_range():
    assert Valid(gt=0, le=1, null="off").text() == "must be in (0, 1] or null (off)"
    assert Valid(ge=0).text() == "must be >= 0"
    assert Valid(choices=("a", "b"), why="c").text() == "choose one of a, b (c)"
    assert Valid(finite=True).text() == "must be finite"


def test_a_user_schema_declares_its_keys_the_same_way():
    @dataclasses.dataclass
    class Mine:
        rate: float = ranged(0.5, gt=0, le=1)

        def __post_init__(self):
            from rltool.config import check_fields

            check_fields(self, "loss")

    assert valid_values(Mine) == {"rate": Valid(gt=0, le=1)}
    with pytest.raises(ConfigError, match=r"^loss.rate=2 is invalid: must be in \(0, 1\]$"):
        Mine(rate=2)


# ---- seeds: every seed a run derives must be one numpy's legacy seeding takes (< 2**32) ----
def largest_seed(*overrides: str) -> int:
    """The largest seed that composes with ``overrides`` (the rule's own bound, read back)."""
    cfg = make_cfg(*overrides)
    n, offset = cfg.env.num_envs * cfg.distributed.nproc_per_node, cfg.eval.seed_offset
    return SEED_LIMIT - max(n, offset + cfg.eval.episodes)


@pytest.mark.parametrize(
    "overrides",
    [(), ("eval.seed_offset=0", "env.num_envs=16", "collector.frames_per_batch=256")],
    ids=str,
)
def test_the_largest_seed_composes_and_one_more_is_refused(overrides):
    top = largest_seed(*overrides)
    assert make_cfg(*overrides, f"seed={top}").seed == top
    with pytest.raises(ConfigError, match=rf"^seed={top + 1} is invalid: .* choose seed <= {top}$"):
        make_cfg(*overrides, f"seed={top + 1}")


def test_the_derived_seeds_reach_the_eval_envs_last_seed():
    """Default eval: seed + 1,000,000 + (10 - 1) is the largest derived seed."""
    assert largest_seed() == SEED_LIMIT - 1_000_000 - 10


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_a_seed_outside_numpys_range_is_refused(seed):
    with pytest.raises(
        ConfigError, match=rf"^seed={seed} is invalid: must be in \[0, 4294967296\)"
    ):
        make_cfg(f"seed={seed}")


def test_a_negative_eval_seed_is_refused():
    with pytest.raises(
        ConfigError, match=r"^eval.seed_offset=-5 is invalid: .*eval.seed_offset >= 0"
    ):
        make_cfg("eval.seed_offset=-5")
    assert make_cfg("seed=5", "eval.seed_offset=-5").eval.seed_offset == -5
