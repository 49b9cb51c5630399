"""rltool: a Hydra-driven RL training toolkit for memory (recurrent) policies."""

__version__ = "0.1.0"


def compose(*overrides: str):
    """``cfg = rltool.compose("env=cartpole_pomdp", "policy=lstm")``: the typed config
    (:class:`rltool.config.Config`) that ``rltool train`` would run with these overrides."""
    from rltool.config_store import compose as _compose

    return _compose(*overrides)


def load_policy(run_dir, checkpoint=None):
    """``policy, state = rltool.load_policy(run_dir)``: the trained policy in exploit mode and
    its initial state (see :mod:`rltool.inference`)."""
    from rltool.inference import load_policy as _load

    return _load(run_dir, checkpoint)
