"""The rltool version (light: no torch), for the modules below the public API that record it
(``config.yaml``'s first line, checkpoints) or name it (a saved key this version does not know).
``rltool.__version__`` is this one."""

from __future__ import annotations


def _version() -> str:
    """The installed package's version (its one source: ``pyproject.toml``, through the package
    metadata); ``0+unknown`` for a source tree on ``PYTHONPATH`` that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rltool")
    except PackageNotFoundError:
        return "0+unknown"


__version__ = _version()
