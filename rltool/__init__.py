"""rltool: a Hydra-driven RL training toolkit for memory (recurrent) policies.

The public Python API (``rltool/api.py``; ``import rltool`` loads no torch until a call needs it):

    cfg = rltool.compose("env=cartpole_pomdp", "policy=lstm")   # what rltool train would run
    summary = rltool.fit(cfg, "runs/lstm", hooks=rltool.Hooks(on_eval=[...]))  # rltool train
    summary = rltool.resume("runs/lstm", "total_frames=200000")
    result = rltool.evaluate("runs/lstm", episodes=20)
    policy, state = rltool.load_policy("runs/lstm")
"""

from rltool.version import __version__  # noqa: F401 - rltool.__version__

# training is ``fit``: ``rltool.train`` is the training loop's module (rltool/train.py)
__all__ = [
    "Hooks",
    "compose",
    "evaluate",
    "fit",
    "load_policy",
    "resume",
    "saved_config",
]

_LAZY = {  # name -> its module, imported on first use
    "fit": "rltool.api",
    "resume": "rltool.api",
    "evaluate": "rltool.api",
    "saved_config": "rltool.config.saved",
    "load_policy": "rltool.deploy.inference",
    "Hooks": "rltool.run.hooks",
}


def compose(*overrides: str):
    """The typed config that ``rltool train <overrides>`` would run with.

    The same config files and the same checks as the command; ``import rltool`` stays free of
    torch until a call needs it.

    Args:
        *overrides (str): Hydra overrides, ``"key=value"`` or ``"group=option"``, as typed after
            ``rltool train``.

    Returns:
        rltool.config.Config: The composed, checked config (a dataclass; groups as attributes).

    Raises:
        rltool.errors.ConfigError: A value outside its declared range or choices (one line
            naming the key and the fix); Hydra's own error for an override that does not parse
            or names no option.

    Example:
        ```python
        cfg = rltool.compose("env=cartpole_pomdp", "policy=lstm", "total_frames=20000")
        ```
    """
    from rltool.config.store import compose as _compose

    return _compose(*overrides)


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'rltool' has no attribute {name!r}")


def __dir__() -> list[str]:
    """Tab completion shows the public API, not only what is loaded so far."""
    return sorted(set(globals()) | set(__all__))
