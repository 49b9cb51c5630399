"""mkdocs hooks (mkdocs.yml ``hooks:``): the site's header shows rltool's version, read from the
package metadata (its one source, ``pyproject.toml``), never written into a page by hand."""

from __future__ import annotations

import contextlib


def on_config(config):
    from importlib.metadata import PackageNotFoundError, version

    # a tree that was never installed builds with the plain name
    with contextlib.suppress(PackageNotFoundError):
        config["site_name"] = f"rltool {version('rltool')}"
    return config
