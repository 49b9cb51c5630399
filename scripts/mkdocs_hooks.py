"""mkdocs hooks (mkdocs.yml ``hooks:``): the site's header shows rltool's version, read from the
package metadata (its one source, ``pyproject.toml``), never written into a page by hand."""

from __future__ import annotations


def on_config(config):
    from importlib.metadata import PackageNotFoundError, version

    try:
        config["site_name"] = f"rltool {version('rltool')}"
    except PackageNotFoundError:  # building the docs from a tree that was never installed
        pass
    return config
