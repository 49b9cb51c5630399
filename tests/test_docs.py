"""The docs site cannot rot: it builds strictly (no broken link or anchor, no page outside the
nav), its generated references are what the code gives, and every repository path a page names
exists."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import ROOT
from test_design_doc import exists, named_paths

PAGES = sorted((ROOT / "docs").rglob("*.md"))


def test_the_generated_references_are_current():
    r = subprocess.run(
        [sys.executable, "scripts/gen_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site, built once with ``mkdocs build --strict``: (return code, output, site folder)."""
    out = tmp_path_factory.mktemp("site")
    r = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"},
    )
    return r.returncode, r.stdout + r.stderr, out


def test_the_site_builds_strictly(site):
    code, output, _ = site
    assert code == 0, output


def test_the_api_page_renders_no_raw_restructuredtext(site):
    """The docstrings mkdocstrings renders are Google style: a reST role or a literal-block
    ``::`` would show as raw text on the page; each function has its parameter table."""
    code, output, folder = site
    assert code == 0, output
    page = (folder / "reference" / "api" / "index.html").read_text()
    article = page[page.index("<article") : page.index("</article>")]
    text = re.sub(r"<[^>]+>", " ", article)
    assert [r for r in (":class:", ":func:", ":mod:", ":meth:", "::") if r in text] == []
    assert text.count("Parameters:") >= 7 and text.count("Example") >= 8


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_page_names_exists(page):
    missing = [p for p in named_paths(page.read_text()) if not exists(p)]
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_the_readmes_test_commands_are_cis():
    """The README's "To run the tests" block is what .ci/run runs (-q aside), so a user who
    follows it gets every package the tests use (the ``test`` extra)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("To run the tests", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    ci = [line.replace(" -q", "") for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    commands = [line.replace(" -q", "") for line in block.strip().splitlines()]
    assert commands and all(c in ci for c in commands), (commands, ci)


def test_every_link_of_the_readme_exists():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [p for p in links if not p.startswith(("http://", "https://"))]
    assert local and [p for p in local if not (ROOT / p).exists()] == []


def test_every_docs_page_the_code_and_configs_name_exists():
    """Comments in rltool/, conf/ and scripts/ point at docs pages (the notes behind a default):
    each exists."""
    files = [*ROOT.glob("rltool/**/*.py"), *ROOT.glob("conf/**/*.yaml"), *ROOT.glob("scripts/*.py")]
    named = {m for f in files for m in re.findall(r"docs/[\w/.-]+\.md", f.read_text())}
    assert named and sorted(p for p in named if not (ROOT / p).is_file()) == []
