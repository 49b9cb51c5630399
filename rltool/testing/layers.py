"""The layers of the package, in one place: ``tests/test_layers.py`` checks every import against
this table and ``scripts/gen_docs.py`` writes it into ``docs/design.md`` (a test keeps the page
equal to it). Lowest first: a module may import only from its own layer and the layers before it.

``PLACES`` maps a path in the repository to its layer: a trailing ``/`` takes a folder and
everything in it, ``*`` is any one path part; the most specific entry wins (more parts, then
fewer ``*``, then a file over a folder). A new module must be placed here.
"""

from __future__ import annotations

# name -> what it may import
LAYERS: dict[str, str] = {
    "base": "nothing else from rltool",
    "config": "base; no torch",
    "components": "base, config",
    "algorithms": "components and below",
    "run": "algorithms and below",
    "commands": "everything",
}
NAMES = tuple(LAYERS)

PLACES: dict[str, str] = {
    "rltool/keys.py": "base",
    "rltool/specs.py": "base",
    "rltool/errors.py": "base",
    "rltool/version.py": "base",  # the installed package's version, rltool.__version__
    "rltool/console.py": "base",  # terminal lines through logging, as the commands show them
    "rltool/testing/": "base",  # fault injection for tests, this layer table
    "rltool/runfolder/": "base",  # file names, the writer lock, atomic writes
    "rltool/config/": "config",  # the schemas, the ConfigStore, what a resume may change
    "rltool/memories.py": "config",  # the memory registry: names, schemas, lazy classes
    "rltool/algos/__init__.py": "config",  # the algorithm registry
    "rltool/algos/*/__init__.py": "config",  # an algorithm's registration
    "rltool/algos/*/config.py": "config",
    "rltool/envs/": "components",
    "rltool/modules/": "components",
    "rltool/collectors/": "components",
    "rltool/losses/": "components",
    "rltool/data/": "components",
    "rltool/logging/": "components",
    "rltool/optim/": "components",  # flat Adam and the non-finite guard
    "rltool/algos/base.py": "algorithms",
    "rltool/algos/*/algorithm.py": "algorithms",
    "rltool/__init__.py": "run",  # the public API, imported lazily
    "rltool/train.py": "run",
    "rltool/api.py": "run",
    "rltool/run/": "run",  # session, checkpoints, evaluation, hooks, compiled steps
    "rltool/distributed/": "run",  # data-parallel ranks and their gradient sums
    "rltool/deploy/": "run",  # load_policy, export
    "rltool/analysis/": "run",  # results, tables, statistics, reports
    "rltool/sweeps/": "run",  # job status, sweep summaries, rltool tune's library
    "rltool/cli/": "commands",
    "rltool/__main__.py": "commands",  # python -m rltool
}
# components that never import an algorithm, not even the registry below them
PURE = ("rltool/envs/", "rltool/modules/", "rltool/collectors/", "rltool/losses/", "rltool/data/")


def table_markdown() -> str:
    """The layer table of ``docs/design.md``: one row per layer, its places and what it may
    import."""
    rows = ["| layer | modules | may import |", "|---|---|---|"]
    for name, may in LAYERS.items():
        places = ", ".join(f"`{p}`" for p, layer in PLACES.items() if layer == name)
        rows.append(f"| {name} | {places} | {may} |")
    return "\n".join(rows)
