"""docs/design.md stays true to the tree: every repository path it names exists, and the README
and rltool/keys.py point to it."""

from __future__ import annotations

import re

from conftest import ROOT

DOC = ROOT / "docs" / "design.md"
TOP = ("rltool", "conf", "scripts", "tests", "docs")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(rf"^(?:{'|'.join(TOP)})/[\w.<>*/-]*$")


def named_paths(text: str) -> list[str]:
    """The backticked spans of ``text`` (outside fenced blocks) that look like repository paths:
    rltool/..., conf/..., scripts/..., tests/..., docs/..."""
    spans = SPAN.findall(FENCE.sub("", text))
    return sorted({s for s in spans if PATH.match(s)})


def exists(path: str) -> bool:
    """A trailing / means a folder, else a file; a part like ``<name>`` or ``*`` (or a part
    holding one, ``<name>.yaml``) matches any one path part."""
    folder = path.endswith("/")
    pattern = re.sub(r"<[^>/]+>", "*", path.rstrip("/"))
    hits = ROOT.glob(pattern) if "*" in pattern else [ROOT / pattern]
    return any(p.is_dir() if folder else p.is_file() for p in hits)


def test_the_helpers_read_paths_as_the_doc_writes_them():
    text = "`rltool/a.py`, `conf/<group>/`, `env=gym env.id=X`, `rltool.cli`\n```\n`tests/x`\n```"
    assert named_paths(text) == ["conf/<group>/", "rltool/a.py"]
    assert exists("conf/<group>/") and exists("conf/env/<name>.yaml") and exists("rltool/")
    assert not exists("conf/env/<name>/") and not exists("rltool/keys.py/")
    assert not exists("rltool/envs")  # a folder is named with its trailing /
    assert not exists("rltool/nope/<name>.py")


def test_every_path_the_design_doc_names_exists():
    paths = named_paths(DOC.read_text())
    assert len(paths) > 20, paths  # the doc names its files; an empty match means a broken regex
    missing = [p for p in paths if not exists(p)]
    assert not missing, f"docs/design.md names paths that do not exist: {missing}"


def test_readme_and_keys_point_to_the_design_doc():
    for path in (ROOT / "README.md", ROOT / "rltool" / "keys.py"):
        text = path.read_text()
        assert "docs/design.md" in text, path
        # any mention of a design page is this one (no stale DESIGN.md at the root)
        others = [m.start() for m in re.finditer(r"design\.md", text, re.I)]
        assert all(text[i - 5 : i] == "docs/" for i in others), path
