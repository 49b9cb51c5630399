"""The layers of docs/design.md, checked on the source: every module under rltool/ is read with
``ast`` (module-level and function-level imports, ``import x`` and ``from x import y``, relative
imports resolved) and may import only from its own layer and those below. A module in no layer
fails too: a new file must be placed in one (rltool/testing/layers.py, the one table;
docs/design.md's copy is generated from it)."""

from __future__ import annotations

import ast
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
from conftest import ROOT

from rltool.testing import layers

NAMES = layers.NAMES
BASE, CONFIG, COMPONENTS, ALGORITHMS, RUN, COMMANDS = range(len(NAMES))
# path in the repository -> layer index, from the one table (rltool/testing/layers.py)
LAYERS = {path: NAMES.index(name) for path, name in layers.PLACES.items()}
PURE = layers.PURE
NO_TORCH = ("torch", "tensordict")  # the config layer composes configs without them


def _matches(pattern: str, path: str) -> bool:
    want, parts = pattern.rstrip("/").split("/"), path.split("/")
    if len(parts) < len(want) or (len(parts) > len(want)) != pattern.endswith("/"):
        return False
    return all(fnmatchcase(p, w) for p, w in zip(parts, want, strict=False))


def layer_of(path: str, layers: dict[str, int] = LAYERS) -> int | None:
    """The layer of ``path`` (relative, with /), or None when no entry places it."""
    hits = [p for p in layers if _matches(p, path)]
    if not hits:
        return None
    best = max(hits, key=lambda p: (p.count("/"), -p.count("*"), not p.endswith("/")))
    return layers[best]


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def module_name(path: str) -> str:
    parts = path.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str, root: Path) -> str:
    """The file of module ``name`` under ``root`` (a package's __init__.py); a module that does
    not exist maps to ``<parts>.py``."""
    base = name.replace(".", "/")
    if (root / base / "__init__.py").is_file():
        return f"{base}/__init__.py"
    return f"{base}.py"


def is_module(name: str, root: Path) -> bool:
    base = root / name.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imports(path: str, root: Path) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file, at any depth: ``from a import b``
    imports ``a.b`` when that is a module, else ``a``; relative imports resolved."""
    tree = ast.parse((root / path).read_text(), path)
    name = module_name(path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                up = package.split(".")
                base = ".".join(up[: len(up) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if a.name != "*" and is_module(sub, root) else base))
    return sorted(set(out))


def violations(root: Path, layers: dict[str, int] = LAYERS) -> list[str]:
    """Every broken rule of the modules under ``root``/rltool, one line each."""
    found = []
    files = sorted(p.relative_to(root).as_posix() for p in (root / "rltool").rglob("*.py"))
    for path in files:
        own = layer_of(path, layers)
        if own is None:
            found.append(f"{path} is in no layer: place it in PLACES (rltool/testing/layers.py)")
            continue
        name = module_name(path)
        for line, target in imports(path, root):
            where = f"{path}:{line} ({NAMES[own]}) imports {target}"
            top = target.partition(".")[0]
            if own == CONFIG and top in NO_TORCH:
                found.append(f"{where}: the config layer imports no torch")
            if top != "rltool":
                continue
            entry = name == "rltool.__main__"  # python -m rltool
            if _within(target, "rltool.cli") and not _within(name, "rltool.cli") and not entry:
                found.append(f"{where}: only rltool/cli/ imports the commands")
            to = module_path(target, root)
            theirs = layer_of(to, layers)
            if not is_module(target, root):
                found.append(f"{where}, which does not exist")
            elif theirs is None:
                found.append(f"{where}, which is in no layer")
            elif theirs > own:
                found.append(f"{where} ({NAMES[theirs]}): a higher layer")
            if any(_matches(p, path) for p in PURE) and _within(target, "rltool.algos"):
                found.append(f"{where}: envs, modules, collectors, losses, data use no algorithm")
    return found


def test_every_module_imports_only_from_its_layer_and_below():
    found = violations(ROOT)
    assert not found, "layer rules broken (docs/design.md, Layers):\n" + "\n".join(found)


def test_the_table_places_the_planned_files():
    assert layer_of("rltool/algos/ppo/config.py") == CONFIG
    assert layer_of("rltool/algos/ppo/__init__.py") == CONFIG
    assert layer_of("rltool/algos/__init__.py") == CONFIG
    assert layer_of("rltool/memories.py") == CONFIG
    assert layer_of("rltool/algos/dqn/algorithm.py") == ALGORITHMS
    assert layer_of("rltool/algos/base.py") == ALGORITHMS
    assert layer_of("rltool/envs/vector.py") == COMPONENTS
    assert layer_of("rltool/cli/resume_argv.py") == COMMANDS
    assert layer_of("rltool/algos/ppo/helpers.py") is None  # not placed: fails until it is
    assert layer_of("rltool/algos/ppo/sub/config.py") is None
    assert layer_of("rltool/new.py") is None


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("from rltool.train import x\n", "rltool.train (run): a higher layer"),
        ("def f():\n    import rltool.train\n", "rltool.train (run): a higher layer"),
        ("def f():\n    from ..train import x\n", "rltool.train (run): a higher layer"),
        ("from .. import train\n", "rltool.train (run): a higher layer"),
        ("from rltool.cli import main\n", "only rltool/cli/ imports the commands"),
        ("from rltool.algos import get\n", "use no algorithm"),
        ("from rltool import nothing_here\n", "imports rltool (run): a higher layer"),
        ("import rltool.gone\n", "rltool.gone, which does not exist"),
    ],
)
def test_a_component_importing_upwards_is_named(tmp_path, source, says):
    root = _tree(
        tmp_path,
        {
            "rltool/__init__.py": "",
            "rltool/keys.py": "",
            "rltool/train.py": "",
            "rltool/cli/__init__.py": "",
            "rltool/algos/__init__.py": "",
            "rltool/envs/__init__.py": "from . import bad\nfrom rltool import keys\n",
            "rltool/envs/bad.py": source,
        },
    )
    found = violations(root)
    assert found and all(f.startswith("rltool/envs/bad.py:") for f in found), found
    assert any(says in f for f in found), found


def test_unplaced_modules_and_torch_in_config_are_named(tmp_path):
    root = _tree(
        tmp_path,
        {
            "rltool/__init__.py": "",
            "rltool/config/__init__.py": "def f():\n    import torch\n",
            "rltool/stray.py": "",
            "rltool/cli/__init__.py": "from rltool.train import train\nfrom . import report\n",
            "rltool/cli/report.py": "",
            "rltool/train.py": "from rltool.config import f\n",
            "rltool/__main__.py": "from rltool.cli import main\n",
        },
    )
    found = violations(root)
    assert found == [
        "rltool/config/__init__.py:2 (config) imports torch: the config layer imports no torch",
        "rltool/stray.py is in no layer: place it in PLACES (rltool/testing/layers.py)",
    ]
