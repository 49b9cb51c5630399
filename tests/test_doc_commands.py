"""Every shell command of the getting-started and how-to pages runs as written, so a renamed key or
option breaks CI, not a reader. Each fenced shell block is marked, on the line above it:

    <!-- test: run -->            this test runs it (the page's blocks in order, in one folder)
    <!-- not-run: <reason> -->    it needs what a test machine lacks (a GPU, Slurm, hours)

An unmarked block fails. The test runs ``rltool`` in this process (``rltool.cli.main``, what
``python -m rltool`` calls) from this checkout and makes every training tiny (what the pages
say, in ``docs/development.md``): ``rltool train`` gets ``total_frames=2048`` (``4096`` where
the line gives a budget, so a resume has more to do), two evaluation episodes and no progress
bar; ``rltool tune`` gets ``trials=2 seeds=1``."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest
from conftest import CLI_PYTHONPATH, ROOT, TINY_EVAL

PAGES = sorted([*(ROOT / "docs" / "getting-started").glob("*.md")])
PAGES += sorted((ROOT / "docs" / "how-to").glob("*.md"))
BLOCK = re.compile(r"(?:^(<!--[^\n]*-->)\n)?^```(?:bash|sh|shell|console)\n(.*?)^```", re.S | re.M)
MARK = re.compile(r"<!-- (test: run|not-run: \S.*) -->")


def blocks(page: Path) -> list[tuple[str | None, str, int]]:
    """(mark or None, body, line) of each fenced shell block."""
    text = page.read_text()
    out = []
    for m in BLOCK.finditer(text):
        mark = MARK.fullmatch(m.group(1) or "")
        out.append((mark.group(1) if mark else None, m.group(2), text[: m.start()].count("\n")))
    return out


def commands(body: str) -> list[str]:
    """The block's commands: continuation lines joined, comments and blank lines dropped."""
    joined = re.sub(r"\s*\\\n\s*", " ", body)
    out = []
    for line in joined.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def tiny(argv: list[str]) -> list[str]:
    """``rltool ...`` arguments with the budgets the module docstring states."""
    if argv[:2] == ["rltool", "tune"]:
        return [*argv, "trials=2", "seeds=1"]
    if argv[:2] != ["rltool", "train"] or any(a in ("--help", "-h", "--cfg") for a in argv):
        return argv
    budget = [a for a in argv if a.startswith("total_frames=")]
    argv = [a for a in argv if not a.startswith("total_frames=")]
    if any(a.startswith("resume=") for a in argv):
        return [*argv, "total_frames=4096"]
    return [*argv, f"total_frames={4096 if budget else 2048}", *TINY_EVAL]


def run(command: str, cwd: Path, cli) -> subprocess.CompletedProcess:
    """``command`` run in ``cwd`` by ``cli`` (the conftest fixture: ``rltool`` in this process,
    which is the same entry point ``python -m rltool`` calls)."""
    argv = tiny(shlex.split(command))
    if argv[0] == "pip":  # installs: what this test runs under has every extra already
        return subprocess.CompletedProcess(argv, 0, "", "")
    if argv[0] != "rltool":
        raise AssertionError(f"a runnable block runs rltool (or pip): {command}")
    return cli(*argv[1:], cwd=cwd)


def test_every_shell_block_is_marked():
    unmarked = [
        f"{p.relative_to(ROOT)}:{line + 1}"
        for p in PAGES
        for mark, _, line in blocks(p)
        if not mark
    ]
    assert not unmarked, f"mark these blocks test: run or not-run: <reason>: {unmarked}"


def test_the_helpers_read_blocks_as_the_pages_write_them():
    body = "rltool train a=1 \\\n  b=2   # note\n# a comment\nrltool eval run=x\n"
    assert commands(body) == ["rltool train a=1 b=2", "rltool eval run=x"]
    assert tiny(["rltool", "train", "resume=r", "total_frames=9"]) == [
        "rltool",
        "train",
        "resume=r",
        "total_frames=4096",
    ]
    assert tiny(["rltool", "train", "--cfg", "job"]) == ["rltool", "train", "--cfg", "job"]


RUNNABLE = [p for p in PAGES if any(mark == "test: run" for mark, _, _ in blocks(p))]


@pytest.mark.slow  # end to end, several processes: 15-30 s on CI
@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: p.name)
def test_the_runnable_blocks_of_a_page_run(page, tmp_path, cli, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", CLI_PYTHONPATH)  # a sweep's worker processes import this
    for mark, body, line in blocks(page):
        if mark != "test: run":
            continue
        for command in commands(body):
            r = run(command, tmp_path, cli)
            where = f"{page.relative_to(ROOT)}:{line + 1}: {command}"
            assert r.returncode == 0, f"{where}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
