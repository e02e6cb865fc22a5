"""The built-in ``wiki_build`` template: a harness writes a wiki describing the repository."""

from __future__ import annotations

from typing import Any

from stageline.operations import OperationContext, operation_stage
from stageline.templates._builder import Template
from stageline.templates.builtin._wiki import POST_STEPS, WikiState, prepare_wiki, wiki_path
from stageline.templates.builtin._wiki_apply import add_apply
from stageline.templates.builtin._wiki_scripts import build_script, rules

__all__ = ["template"]


def _prompt(state: Any, op: OperationContext) -> str:
    topic = state.get("topic") or f"the repository {op.repo.name}"
    return (
        f"Build a wiki at {op.prepared['wiki_rel']} that explains {topic}: an overview.md page, "
        "then one page per major area of the repository (what it holds, how its parts fit), "
        f"each linked from the overview.\n\n{rules(op)}"
    )


build = operation_stage(
    "wiki_build",
    prompt=_prompt,
    repo=wiki_path,
    prepare=prepare_wiki,
    script=build_script,
    post_steps=POST_STEPS,
    title=lambda s: f"build wiki {s['wiki']}",
)

template = Template(
    "wiki_build",
    state=WikiState,
    version="2",
    description="Write a Markdown wiki that explains a repository on a branch,\n"
    "index and validate it, then apply it to the checkout at a gate (or with --apply).",
)
template.add_stage("build", build)
add_apply(template, after="build")  # the result comes into the checkout by the apply gate
