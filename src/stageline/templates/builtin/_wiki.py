"""What the wiki templates share: pages, front matter, links, the index page and validation.

A wiki is a folder of Markdown pages inside a git repository. Every page starts with YAML
front matter holding a ``title``; pages link to each other with relative Markdown links (or
``[[page]]``); ``index.md`` lists every page with its title and is rewritten after each run.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any, Required
from urllib.parse import unquote

import yaml

from stageline.errors import InputError
from stageline.harnesses import HarnessResult
from stageline.operations import (
    FailurePhase,
    Isolation,
    OperationContext,
    OperationInputs,
    PostStep,
    commit_all,
    isolate,
    revert,
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
    apply: bool
    """Bring the result into the checkout at once, without the ``apply`` gate (``--apply``)."""
    checkout: str
    wiki_rel: str
    """The wiki folder, relative to the repository (what the apply step brings over)."""
    branch: str
    worktree: str
    base_commit: str
    commit: str
    changes: str
    """What the operation changed on its branch (``git diff --stat``), shown at the gate."""
    applied: list[str]


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


def _home(op: OperationContext) -> list[Path]:
    """stageline's own folder (run folders are HOME/runs/RUN), when it is inside the repo."""
    home = op.run_dir.parents[1]
    return [] if home == op.repo or home in op.repo.parents else [home]


def git_snapshot(repo: Path, exclude: list[Path]) -> dict[str, str]:
    """``git status`` entries of ``repo``, each with a digest of the file's content."""
    done = subprocess.run(
        ["git", "-C", str(repo), "status", "--porcelain=v1", "-z", "--untracked-files=all"],
        capture_output=True,
        check=True,
    )
    parts = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    found: dict[str, str] = {}
    skip_next = False
    for entry in parts:
        if skip_next or len(entry) < 4:
            skip_next = False
            continue
        code, rel = entry[:2], entry[3:]
        skip_next = code[0] in "RC"  # a rename's old path follows in its own field
        path = repo / rel
        if any(path == ex or ex in path.parents for ex in exclude):
            continue
        digest = hashlib.sha1(path.read_bytes()).hexdigest() if path.is_file() else "-"
        found[rel] = f"{code}:{digest}"
    return found


def prepare_wiki(state: Any, op: OperationContext) -> dict[str, Any]:
    """source_preparation for every wiki template: the run's worktree on its own branch, with
    the checkout's current wiki carried in, and the worktree's baseline. The agent works in the
    worktree; the checkout is never written before the ``apply`` step."""
    wiki = wiki_path(state)
    if wiki.exists() and not wiki.is_dir():
        raise InputError(f"wiki {wiki} is a file, not a folder")
    checkout = op.repo
    wiki_rel = wiki.relative_to(checkout).as_posix()
    if wiki_rel in (".", ""):
        raise InputError("the wiki folder cannot be the repository's root; name a folder in it")
    iso = isolate(checkout, op.run_dir, op.run_id, carry=[wiki_rel])
    op.repo = iso.worktree
    return {
        "wiki": str(iso.worktree / wiki_rel),
        "wiki_rel": wiki_rel,
        "checkout": str(checkout),
        "checkout_wiki": str(wiki),
        "branch": iso.branch,
        "worktree": str(iso.worktree),
        "base_commit": iso.base,
        "baseline": git_snapshot(op.repo, _home(op)),
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
    """Front matter on every page, internal links that resolve, nothing written outside."""
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
    before: dict[str, str] = op.prepared["baseline"]
    after = git_snapshot(op.repo, _home(op))
    for rel in sorted(set(before) | set(after)):
        inside = (op.repo / rel).resolve()
        if before.get(rel) != after.get(rel) and wiki != inside and wiki not in inside.parents:
            problems.append(f"{rel}: written outside the wiki root {op.prepared['wiki_rel']}")
    if problems:
        revert(op.repo, op.prepared["base_commit"])  # nothing of a failed run is kept
        raise WikiInvalid(problems)
    return {}


def commit_wiki(state: Any, op: OperationContext, result: HarnessResult) -> dict[str, Any]:
    """The validated wiki as a commit on the run's branch, and what it changed."""
    base = op.prepared["base_commit"]
    message = f"{op.node}: {result.summary or 'update the wiki'}\n\nstageline run {op.run_id}"
    commit = commit_all(op.repo, message)
    stat = subprocess.run(
        ["git", "-C", str(op.repo), "diff", "--stat", f"{base}..{commit}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return {
        "checkout": op.prepared["checkout"],
        "wiki_rel": op.prepared["wiki_rel"],
        "branch": op.prepared["branch"],
        "worktree": op.prepared["worktree"],
        "base_commit": base,
        "commit": commit,
        "changes": stat or "(no changes)",
    }


def isolation_of(state: Any) -> Isolation:
    return Isolation(
        checkout=Path(state["checkout"]),
        worktree=Path(state["worktree"]),
        branch=str(state["branch"]),
        base=str(state["base_commit"]),
    )


POST_STEPS = (
    PostStep(name="refresh_index", phase=FailurePhase.INDEXING, run=refresh_index),
    PostStep(name="validate", phase=FailurePhase.VALIDATION, run=validate_wiki),
    PostStep(name="commit", phase=FailurePhase.VALIDATION, run=commit_wiki),
)
"""After the harness: rewrite the index, validate the wiki, commit it on the run's branch."""
