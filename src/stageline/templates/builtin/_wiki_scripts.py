"""Prompts for real agents, and the scripts the offline (scripted) agent replays instead.

Each script is derived deterministically from the inputs and the repository, so an offline
run writes the same pages every time and goes through the same indexing and validation as
an agent would.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stageline.errors import InputError
from stageline.operations import OperationContext
from stageline.templates.builtin._wiki import (
    INDEX,
    broken_links,
    front_matter,
    pages,
    resolve,
    title_of,
)

__all__ = [
    "RULES",
    "build_script",
    "garden_script",
    "ingest_script",
    "ingest_sources",
]

RULES = (
    "Rules: write only inside the wiki folder {wiki}. Every page is Markdown and starts with "
    "YAML front matter holding a `title` (---\\ntitle: ...\\n---). Link pages with relative "
    "Markdown links that resolve. Do not write {index}: it is regenerated after you finish. "
    "End with a one-line summary of what you changed."
)
TEXT_SUFFIXES = frozenset(
    {".md", ".markdown", ".txt", ".rst", ".py", ".toml", ".yaml", ".yml", ".json", ".cfg", ".ini"}
)
MAX_SOURCES = 200
EXCERPT = 600
_LINKISH = re.compile(r"!?\[([^\]]*)\]\([^)]*\)|\[\[([^\]|]+)(?:\|[^\]]*)?\]\]")


def rules(op: OperationContext) -> str:
    return RULES.format(wiki=op.prepared["wiki_rel"], index=INDEX)


def _plain(text: str) -> str:
    """Markdown links reduced to their text: an excerpt must not carry links that break."""
    return _LINKISH.sub(lambda m: m.group(1) or m.group(2) or "", text)


def _slug(rel: Path, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", rel.with_suffix("").as_posix().lower()).strip("-") or "page"
    base = "index-source" if base == "index" else base
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _step_result(summary: str) -> dict[str, Any]:
    return {"event": {"type": "result", "status": "succeeded", "summary": summary, "text": summary}}


# -- ingest -------------------------------------------------------------------------------------


def ingest_sources(state: Any, op: OperationContext) -> dict[str, Any]:
    """source_preparation for ingest: the source files, wiki pages and hidden folders left out."""
    given = state.get("source")
    if not given:
        raise InputError("wiki_ingest needs a `source` input: a file or folder (-i source=PATH)")
    source = resolve(str(given))
    wiki = Path(op.prepared.get("checkout_wiki") or op.prepared["wiki"])
    if not source.exists():
        raise InputError(f"source {given} does not exist")
    if source.is_file():
        files, base = [source], source.parent
    else:
        base = source
        files = sorted(
            p
            for p in source.rglob("*")
            if p.is_file()
            and p.suffix.lower() in TEXT_SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(source).parts)
            and wiki not in p.parents
        )[:MAX_SOURCES]
    if not files:
        raise InputError(f"source {given} holds no text files to ingest")
    return {"sources": [(str(p), p.relative_to(base).as_posix()) for p in files]}


def _shown(path: Path, op: OperationContext) -> str:
    for repo in (op.repo, Path(op.prepared.get("checkout") or op.repo)):
        if repo in path.parents:
            return path.relative_to(repo).as_posix()
    return path.name


def _ingest_page(path: Path, rel: str, op: OperationContext) -> tuple[str, str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    meta = front_matter(text)
    body = text.split("\n---", 2)[-1] if meta is not None else text
    title = _plain(title_of(path, text)) if path.suffix.lower() in (".md", ".markdown") else rel
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", body) if p.strip()]
    prose = next((p for p in paragraphs if not p.startswith(("#", "```", "<", "|", "!["))), "")
    excerpt = " ".join(_plain(prose).split())
    if len(excerpt) > EXCERPT:
        excerpt = excerpt[: EXCERPT - 1] + "…"
    headings = [
        _plain(line.lstrip("#").strip()) for line in body.splitlines() if re.match(r"#{2,3} ", line)
    ][:15]
    shown = _shown(path, op)
    lines = [
        "---",
        f"title: {_quote(title)}",
        f"source: {_quote(shown)}",
        "ingested_by: stageline",
        "---",
        "",
        f"# {title}",
        "",
        f"Ingested from `{shown}` ({len(text.splitlines())} lines).",
        "",
    ]
    if excerpt:
        lines += [excerpt, ""]
    if headings:
        lines += ["## Outline", "", *[f"- {h}" for h in headings], ""]
    lines += [f"See the [index]({INDEX}) for every page.", ""]
    return title, "\n".join(lines)


def ingest_script(state: Any, op: OperationContext) -> list[dict[str, Any]]:
    wiki_rel = op.prepared["wiki_rel"]
    taken: set[str] = set()  # re-ingesting a source rewrites its page
    steps: list[dict[str, Any]] = [
        {
            "event": {
                "type": "message",
                "text": f"Ingesting {len(op.prepared['sources'])} source file(s).",
            }
        }
    ]
    for path, rel in op.prepared["sources"]:
        slug = _slug(Path(rel), taken)
        title, content = _ingest_page(Path(path), rel, op)
        steps.append({"write": f"{wiki_rel}/{slug}.md", "content": content})
        steps.append({"event": {"type": "tool_summary", "text": f"{rel} -> {slug}.md: {title}"}})
    n = len(op.prepared["sources"])
    return [*steps, _step_result(f"ingested {n} source file(s) into {wiki_rel}")]


# -- build --------------------------------------------------------------------------------------


def build_script(state: Any, op: OperationContext) -> list[dict[str, Any]]:
    """An overview page of the repository and one page per top-level folder."""
    wiki_rel = op.prepared["wiki_rel"]
    listed = subprocess.run(
        ["git", "-C", str(op.repo), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.splitlines()
    areas: dict[str, list[str]] = {}
    files: list[str] = []
    for rel in listed:
        top, _, rest = rel.partition("/")
        if top.startswith(".") or rel == wiki_rel or rel.startswith(f"{wiki_rel}/"):
            continue
        if rest:
            areas.setdefault(top, []).append(rest)
        else:
            files.append(top)
    name = state.get("topic") or op.repo.name
    steps: list[dict[str, Any]] = []
    overview = [
        "---",
        f"title: {_quote(f'{name} overview')}",
        "---",
        "",
        f"# {name} overview",
        "",
        f"The repository holds {len(listed)} tracked files.",
        "",
    ]
    if areas:
        overview += ["## Folders", ""]
        for top in sorted(areas):
            slug = "area-" + re.sub(r"[^a-z0-9]+", "-", top.lower()).strip("-")
            overview.append(f"- [{top}]({slug}.md): {len(areas[top])} files")
            page = [
                "---",
                f"title: {_quote(f'Folder {top}')}",
                "---",
                "",
                f"# Folder {top}",
                "",
                f"Part of the [{name} overview](overview.md).",
                "",
                "## Files",
                "",
                *[f"- `{top}/{f}`" for f in sorted(areas[top])[:50]],
            ]
            if len(areas[top]) > 50:
                page.append(f"- … and {len(areas[top]) - 50} more")
            steps.append({"write": f"{wiki_rel}/{slug}.md", "content": "\n".join(page) + "\n"})
        overview.append("")
    if files:
        overview += ["## Top-level files", "", *[f"- `{f}`" for f in sorted(files)], ""]
    steps.insert(0, {"write": f"{wiki_rel}/overview.md", "content": "\n".join(overview)})
    return [*steps, _step_result(f"built {len(steps)} page(s) in {wiki_rel} for {name}")]


# -- garden -------------------------------------------------------------------------------------


def _shown_as(name: str) -> Callable[[re.Match[str]], str]:
    """A ``[[name|alias]]`` link becomes its alias, or its name."""
    return lambda m: m.group(1) or name


def garden_script(state: Any, op: OperationContext) -> list[dict[str, Any]]:
    """Add missing front matter and unlink broken internal links, page by page."""
    wiki = Path(op.prepared["wiki"])
    wiki_rel = op.prepared["wiki_rel"]
    steps: list[dict[str, Any]] = []
    added = unlinked = 0
    for page in pages(wiki):
        if page == wiki / INDEX:
            continue
        text = new = page.read_text(encoding="utf-8", errors="replace")
        if front_matter(text) is None:
            new = f"---\ntitle: {_quote(title_of(page, text))}\n---\n\n{text.lstrip()}"
            added += 1
        for target in sorted(set(broken_links(page, new, wiki, op.repo))):
            if target.startswith("[["):
                name = target[2:-2]
                new, count = re.subn(
                    r"\[\[\s*" + re.escape(name) + r"\s*(?:#[^\]|]*)?"
                    r"(?:\|([^\]]*))?\]\]",
                    _shown_as(name),
                    new,
                )
            else:
                pattern = r"!?\[([^\]]*)\]\(\s*<?" + re.escape(target) + r">?[^)]*\)"
                new, count = re.subn(pattern, lambda m: m.group(1), new)
            unlinked += count
        if new != text:
            rel = page.relative_to(op.repo).as_posix()
            steps.append({"write": rel, "content": new})
    summary = (
        f"gardened {wiki_rel}: front matter added to {added} page(s), "
        f"{unlinked} broken link(s) unlinked"
    )
    return [{"event": {"type": "message", "text": summary}}, *steps, _step_result(summary)]
