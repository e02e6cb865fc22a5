"""What the wiki templates share: pages, front matter, links, the index page and validation.

A wiki is a folder of Markdown pages inside a git repository. Every page starts with YAML
front matter holding a ``title``; pages link to each other with relative Markdown links (or
``[[page]]``); ``index.md`` lists every page with its title and is rewritten after each run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Required
from urllib.parse import unquote

import yaml

from stageline.errors import InputError
from stageline.harnesses import HarnessResult
from stageline.operations import (
    FailurePhase,
    OperationContext,
    OperationInputs,
    PostStep,
)
from stageline.plaindata import BoundedSafeLoader

__all__ = [
    "INDEX",
    "POST_STEPS",
    "WikiInvalid",
    "WikiState",
    "broken_links",
    "front_matter",
    "pages",
    "prepare_wiki",
    "refresh_index",
    "render_index",
    "title_of",
    "validate_wiki",
    "wiki_path",
]

INDEX = "index.md"
_FRONT = re.compile(r"\A---[ \t]*\n(.*?)\n---[ \t]*(?:\n|\Z)", re.S)
_LINK = re.compile(r"!?\[([^\]]*)\]\(\s*(<[^>]*>|[^)\s]*)(?:\s+\"[^\"]*\")?\s*\)")
_WIKILINK = re.compile(r"\[\[([^\]|#]+)(?:#[^\]|]*)?(?:\|[^\]]*)?\]\]")
_CODE = re.compile(r"(^|\n)(```|~~~).*?(\n\2[^\n]*(?=\n|\Z)|\Z)|`[^`\n]*`", re.S)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


class WikiState(OperationInputs, total=False):
    wiki: Required[str]
    """The wiki folder (made if missing); relative paths are from the working folder."""
    source: str
    """wiki_ingest: a file or folder to ingest."""
    topic: str
    """wiki_build: what the wiki should explain (default: the repository)."""
    index_path: str
    pages: list[str]


class WikiInvalid(Exception):
    """The wiki breaks a rule; the message names each page and link at fault."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        super().__init__("; ".join(problems[:3]) + more)


def resolve(value: str) -> Path:
    path = Path(value).expanduser()
    return (path if path.is_absolute() else Path.cwd() / path).resolve()


def wiki_path(state: Any) -> Path:
    wiki = state.get("wiki")
    if not wiki or not str(wiki).strip():
        raise InputError("a wiki template needs a `wiki` input: the wiki folder (-i wiki=PATH)")
    return resolve(str(wiki))


def pages(wiki: Path) -> list[Path]:
    """Every Markdown page under ``wiki``, hidden folders left out, in path order."""
    if not wiki.is_dir():
        return []
    found = [
        p
        for p in wiki.rglob("*.md")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(wiki).parts)
    ]
    return sorted(found, key=lambda p: p.relative_to(wiki).as_posix())


def front_matter(text: str) -> dict[str, Any] | None:
    found = _FRONT.match(text.replace("\r\n", "\n"))
    if not found:
        return None
    try:
        data = yaml.load(found.group(1), Loader=BoundedSafeLoader)
    except yaml.YAMLError:
        return None
    return data if isinstance(data, dict) else None


def title_of(page: Path, text: str) -> str:
    meta = front_matter(text) or {}
    if str(meta.get("title") or "").strip():
        return str(meta["title"]).strip()
    for line in text.splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return page.stem.replace("-", " ").replace("_", " ")


def _href(rel: str) -> str:
    return f"<{rel}>" if " " in rel else rel


def render_index(wiki: Path) -> str:
    lines = ["---", 'title: "Index"', "generated: stageline", "---", "", "# Index", ""]
    for page in pages(wiki):
        rel = page.relative_to(wiki).as_posix()
        if rel != INDEX:
            title = title_of(page, page.read_text(encoding="utf-8", errors="replace"))
            lines.append(f"- [{title.replace(']', ')')}]({_href(rel)})")
    if len(lines) == 7:
        lines.append("_No pages yet._")
    return "\n".join(lines) + "\n"


def links(text: str) -> list[str]:
    """Link targets in Markdown text, code spans and fenced blocks left out."""
    prose = _CODE.sub(" ", text)
    found = [m.group(2).strip("<>") for m in _LINK.finditer(prose)]
    found += [f"[[{m.group(1).strip()}]]" for m in _WIKILINK.finditer(prose)]
    return found


def _internal(target: str) -> bool:
    return bool(target) and not target.startswith(("#", "//")) and not _SCHEME.match(target)


def _target_path(target: str, page: Path, wiki: Path, repo: Path) -> Path:
    if target.startswith("[["):
        name = target[2:-2].strip()
        return wiki / (name if name.endswith(".md") else f"{name}.md")
    path = unquote(target.split("#", 1)[0].split("?", 1)[0])
    return (repo / path.lstrip("/")) if path.startswith("/") else page.parent / path


def broken_links(page: Path, text: str, wiki: Path, repo: Path) -> list[str]:
    """The internal link targets on ``page`` that point at nothing."""
    return [
        t
        for t in links(text)
        if _internal(t) and not _target_path(t, page, wiki, repo).resolve().exists()
    ]


def prepare_wiki(state: Any, op: OperationContext) -> dict[str, Any]:
    """source_preparation for every wiki template. The operation already works in the run's
    worktree, the checkout's current wiki carried in and the only path it may write."""
    wiki = wiki_path(state)
    if wiki.exists() and not wiki.is_dir():
        raise InputError(f"wiki {wiki} is a file, not a folder")
    checkout = op.isolation.checkout if op.isolation is not None else op.repo
    wiki_rel = wiki.relative_to(checkout).as_posix()
    if wiki_rel in (".", ""):
        raise InputError("the wiki folder cannot be the repository's root; name a folder in it")
    return {
        "wiki": str(op.repo / wiki_rel),
        "wiki_rel": wiki_rel,
        "checkout_wiki": str(wiki),
    }


def refresh_index(state: Any, op: OperationContext, result: HarnessResult) -> dict[str, Any]:
    """Rewrite ``index.md``: every page with its title."""
    wiki = Path(op.prepared["wiki"])
    wiki.mkdir(parents=True, exist_ok=True)
    index = wiki / INDEX
    index.write_text(render_index(wiki), encoding="utf-8")
    return {
        "index_path": str(index),
        "pages": [p.relative_to(wiki).as_posix() for p in pages(wiki)],
    }


def validate_wiki(state: Any, op: OperationContext, result: HarnessResult) -> dict[str, Any]:
    """Front matter on every page and internal links that resolve (the operation itself
    refuses writes outside the wiki)."""
    wiki = Path(op.prepared["wiki"])
    problems: list[str] = []
    found = pages(wiki)
    if not [p for p in found if p.name != INDEX or p.parent != wiki]:
        problems.append(f"{op.prepared['wiki_rel']}: the wiki has no pages")
    for page in found:
        text = page.read_text(encoding="utf-8", errors="replace")
        shown = page.relative_to(op.repo).as_posix()
        meta = front_matter(text)
        if meta is None:
            problems.append(f"{shown}: no front matter (a leading --- block with a title)")
        elif not str(meta.get("title") or "").strip():
            problems.append(f"{shown}: front matter has no title")
        problems += [f"{shown}: broken link {t!r}" for t in broken_links(page, text, wiki, op.repo)]
    if problems:  # the operation resets the worktree: nothing of a failed run is kept
        raise WikiInvalid(problems)
    return {}


POST_STEPS = (
    PostStep(name="refresh_index", phase=FailurePhase.INDEXING, run=refresh_index),
    PostStep(name="validate", phase=FailurePhase.VALIDATION, run=validate_wiki),
)
"""After the harness: rewrite the index, validate the wiki (the operation then commits it on
the run's branch)."""
