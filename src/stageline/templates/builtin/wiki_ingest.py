"""The built-in ``wiki_ingest`` template: a harness turns a source file or folder into pages."""

from __future__ import annotations

from typing import Any

from stageline.operations import OperationContext, operation_stage
from stageline.templates._builder import Template
from stageline.templates.builtin._checks import path_input
from stageline.templates.builtin._wiki import POST_STEPS, WikiState, prepare_wiki, wiki_path
from stageline.templates.builtin._wiki_apply import add_apply
from stageline.templates.builtin._wiki_scripts import ingest_script, ingest_sources, rules

__all__ = ["template"]


def _prepare(state: Any, op: OperationContext) -> dict[str, Any]:
    op.prepared.update(prepare_wiki(state, op))
    return ingest_sources(state, op)


def _prompt(state: Any, op: OperationContext) -> str:
    listing = "\n".join(f"- {rel}" for _, rel in op.prepared["sources"][:50])
    return (
        f"Ingest {state['source']} into the wiki at {op.prepared['wiki_rel']}: read each source "
        "file and write or update one page per source with its title, a short summary and its "
        f"outline, linked to related pages.\n\nSources:\n{listing}\n\n{rules(op)}"
    )


ingest = operation_stage(
    "wiki_ingest",
    prompt=_prompt,
    repo=wiki_path,
    prepare=_prepare,
    script=ingest_script,
    post_steps=POST_STEPS,
    title=lambda s: f"ingest {s.get('source', '')} into {s['wiki']}",
)

template = Template(
    "wiki_ingest",
    state=WikiState,
    version="2",
    description="Ingest a source file or folder into a Markdown wiki on a branch,\n"
    "index and validate it, then apply it to the checkout at a gate (or with --apply).",
)
template.add_stage("ingest", ingest)
template.require_input("source", "a file or folder to ingest")
template.add_input_check(path_input("source"))
add_apply(template, after="ingest")  # the result comes into the checkout by the apply gate
