"""The built-in ``wiki_garden`` template: a harness tidies an existing wiki's pages."""

from __future__ import annotations

from typing import Any

from stageline.operations import OperationContext, operation_stage
from stageline.templates._builder import Template
from stageline.templates.builtin._checks import path_input
from stageline.templates.builtin._wiki import POST_STEPS, WikiState, prepare_wiki, wiki_path
from stageline.templates.builtin._wiki_apply import add_apply
from stageline.templates.builtin._wiki_scripts import garden_script, rules

__all__ = ["template"]


def _prompt(state: Any, op: OperationContext) -> str:
    return (
        f"Garden the wiki at {op.prepared['wiki_rel']}: give every page front matter with a "
        "title, fix or remove links that point at nothing, merge duplicate pages and link "
        f"related ones. Keep each page's meaning.\n\n{rules(op)}"
    )


garden = operation_stage(
    "wiki_garden",
    prompt=_prompt,
    repo=wiki_path,
    prepare=prepare_wiki,
    script=garden_script,
    post_steps=POST_STEPS,
    title=lambda s: f"garden wiki {s['wiki']}",
)

template = Template(
    "wiki_garden",
    state=WikiState,
    version="2",
    description="Tidy a Markdown wiki (front matter, broken links) on a branch,\n"
    "index and validate it, then apply it to the checkout at a gate (or with --apply).",
)
template.add_stage("garden", garden)
template.add_input_check(path_input("wiki", kind="folder"))  # a wiki to tidy must exist
add_apply(template, after="garden")  # the result comes into the checkout by the apply gate
