"""The wiki templates offline (scripted harness): pages, the index, validation, gardening."""

from __future__ import annotations

import re
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings
from stageline.errors import InputError
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.templates import load_template
from stageline.templates.builtin._wiki import (
    broken_links,
    front_matter,
    links,
    render_index,
    title_of,
)
from stageline.testing import memory_runner

GIT = ["git", "-c", "user.email=t@example.com", "-c", "user.name=t"]


def git(repo: Path, *args: str) -> None:
    subprocess.run([*GIT, "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text(
        "# Sample project\n\nIt does [many things](docs/guide.md) well.\n\n## Install\n\n"
        "pip install it\n\n## Use\n\n```\nrun [x](nowhere.md)\n```\n"
    )
    (root / "docs" / "guide.md").write_text("---\ntitle: The guide\n---\n# Guide\n\nRead me.\n")
    (root / "docs" / "notes.txt").write_text("plain notes\n")
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("print('hi')\n")
    git(root, "init", "-q")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "init")
    return root


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


def test_helpers_read_front_matter_titles_and_links(tmp_path: Path) -> None:
    page = tmp_path / "a.md"
    text = (
        "---\ntitle: Alpha\n---\n# Heading\n[b](b.md) [web](https://x.y) [top](#top) "
        "![img](img.png) [[Gamma|g]] `[code](no.md)`\n"
    )
    assert front_matter(text) == {"title": "Alpha"}
    assert front_matter("# no front matter") is None
    assert title_of(page, text) == "Alpha"
    assert title_of(page, "# Heading only\n") == "Heading only"
    assert links(text) == ["b.md", "https://x.y", "#top", "img.png", "[[Gamma]]"]
    (tmp_path / "b.md").write_text("---\ntitle: Beta\n---\n")
    assert broken_links(page, text, tmp_path, tmp_path) == ["img.png", "[[Gamma]]"]
    page.write_text(text)
    index = render_index(tmp_path)
    assert "- [Alpha](a.md)" in index and "- [Beta](b.md)" in index
    assert front_matter(index) == {"title": "Index", "generated": "stageline"}


async def test_ingest_a_folder_writes_pages_and_an_index_that_validate(
    runner: Runner, repo: Path
) -> None:
    wiki = repo / "wiki"
    summary = await runner.start(
        "wiki_ingest", {"source": str(repo / "docs"), "wiki": str(wiki), "apply": True}
    )
    assert summary.status is RunStatus.SUCCEEDED, summary.run.error
    assert sorted(p.name for p in wiki.iterdir()) == ["guide.md", "index.md", "notes.md"]
    assert front_matter((wiki / "guide.md").read_text())["title"] == "The guide"  # type: ignore[index]
    index = (wiki / "index.md").read_text()
    assert "- [The guide](guide.md)" in index and "- [notes.txt](notes.md)" in index
    assert summary.state["pages"] == ["guide.md", "index.md", "notes.md"]
    assert summary.state["summary"] == "ingested 2 source file(s) into wiki"


async def test_ingest_strips_links_an_excerpt_would_break(runner: Runner, repo: Path) -> None:
    summary = await runner.start(
        "wiki_ingest", {"source": str(repo / "README.md"), "wiki": str(repo / "kb"), "apply": True}
    )
    assert summary.status is RunStatus.SUCCEEDED, summary.run.error
    page = (repo / "kb" / "readme.md").read_text()
    assert "It does many things well." in page and "## Outline\n\n- Install\n- Use" in page


@pytest.mark.parametrize(
    ("inputs", "why"),
    [
        ({"source": "nope.md", "wiki": "wiki"}, "input 'source': nope.md does not exist"),
        ({"wiki": "wiki"}, "missing required input 'source'"),
        ({"source": "README.md"}, "missing required input 'wiki'"),
        ({"source": "README.md", "wiki": "README.md"}, "input 'wiki': README.md is a file"),
        ({"source": "README.md", "wiki": "wiki", "harness": "robot"}, "unknown harness 'robot'"),
        ({"source": "README.md", "wiki": 5}, "input 'wiki' must be a path"),
    ],
)
async def test_input_errors_are_caught_before_a_run_exists(
    runner: Runner, repo: Path, monkeypatch: pytest.MonkeyPatch, inputs: dict[str, Any], why: str
) -> None:
    monkeypatch.chdir(repo)
    with pytest.raises(InputError, match=re.escape(why)):
        await runner.start("wiki_ingest", inputs)
    assert await runner.ledger.list_runs() == []


async def test_a_wiki_outside_git_is_an_input_error(runner: Runner, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not inside a git repository"):
        await runner.start("wiki_build", {"wiki": str(tmp_path / "plain" / "wiki")})
    with pytest.raises(InputError, match=r"input 'wiki'.* does not exist"):
        await runner.start("wiki_garden", {"wiki": str(tmp_path / "nowhere")})


async def test_broken_link_fails_validation_naming_page_and_link(
    runner: Runner, repo: Path
) -> None:
    script = [{"write": "wiki/a.md", "content": "---\ntitle: A\n---\nSee [gone](gone.md).\n"}]
    summary = await runner.start(
        "wiki_ingest",
        {
            "source": str(repo / "README.md"),
            "wiki": str(repo / "wiki"),
            "script": script,
            "apply": True,
        },
    )
    assert summary.run.failure_phase == "validation"
    assert summary.run.error == "OperationFailed: wiki/a.md: broken link 'gone.md'"
    assert not (repo / "wiki").exists()  # the agent worked on its branch; nothing came back


async def test_missing_front_matter_and_writes_outside_fail_validation(
    runner: Runner, repo: Path
) -> None:
    script = [
        {"write": "wiki/bare.md", "content": "# Bare\n"},
        {"write": "src/app.py", "content": "print('changed')\n"},
    ]
    summary = await runner.start(
        "wiki_build", {"wiki": str(repo / "wiki"), "script": script, "apply": True}
    )
    error = summary.run.error or ""
    assert summary.run.failure_phase == "validation"
    # a write outside the wiki fails first, whatever the pages are like
    assert error == "OperationFailed: src/app.py: written outside the allowed path wiki"
    assert (repo / "src" / "app.py").read_text() == "print('hi')\n"
    assert not (repo / "wiki").exists()


async def test_build_then_garden_repairs_a_damaged_wiki(runner: Runner, repo: Path) -> None:
    wiki = repo / "wiki"
    built = await runner.start("wiki_build", {"wiki": str(wiki), "apply": True})
    assert built.status is RunStatus.SUCCEEDED, built.run.error
    made = {p.name for p in wiki.iterdir()}
    assert {"overview.md", "area-docs.md", "area-src.md", "index.md"} <= made
    assert "[docs](area-docs.md)" in (wiki / "overview.md").read_text()
    (wiki / "loose.md").write_text("# Loose page\n\nSee [missing](missing.md) and [[Nowhere]].\n")
    garden = await runner.start("wiki_garden", {"wiki": str(wiki), "apply": True})
    assert garden.status is RunStatus.SUCCEEDED, garden.run.error
    loose = (wiki / "loose.md").read_text()
    assert front_matter(loose) == {"title": "Loose page"}
    assert "See missing and Nowhere." in loose
    assert "- [Loose page](loose.md)" in (wiki / "index.md").read_text()
    assert garden.state["summary"].endswith(
        "front matter added to 1 page(s), 2 broken link(s) unlinked"
    )


def test_the_wiki_templates_are_built_ins() -> None:
    for name in ("wiki_build", "wiki_ingest", "wiki_garden"):
        assert load_template(name).name == name


async def test_apply_gate_never_overwrites_the_checkout(runner: Runner, repo: Path) -> None:
    waiting = await runner.start("wiki_build", {"wiki": str(repo / "wiki")})
    assert [w.name for w in waiting.waiting] == ["apply"]
    assert not (repo / "wiki").exists()  # nothing before the person approves
    (repo / "wiki").mkdir()
    (repo / "wiki" / "overview.md").write_text("mine, not committed\n")
    done = await runner.approve(waiting.run.run_id)
    assert done.status is RunStatus.FAILED
    assert f"merge the branch yourself: git merge stageline/{waiting.run.run_id}" in (
        done.run.error or ""
    )
    assert (repo / "wiki" / "overview.md").read_text() == "mine, not committed\n"
    assert sorted(p.name for p in (repo / "wiki").iterdir()) == ["overview.md"]
