"""What the architect model is asked, and how its draft is read back.

The model gets the goal, the catalog (each stage's YAML reference, capability, description,
reads and writes) and the YAML template format; after a failed check it gets the error (file,
line, reason) and its own draft. Its reply is structured as one ``yaml`` block (or a JSON
object with a ``yaml`` field); anything else is a draft that fails the checks like any other.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FORMAT", "SYSTEM", "catalog_lines", "draft_prompt", "extract_yaml"]

SYSTEM = (
    "You are stageline's architect. You compose a pipeline for a goal as a stageline YAML "
    "template, using only the stages of the catalog you are given. Reply with the template "
    "only, in one ```yaml block."
)

FORMAT = """\
name: my_pipeline                 # required
description: ...
state:                            # every state key any stage reads or writes
  topic: {type: str, required: true}   # types: str int float bool list dict any
  reviews: {type: list, reducer: append}   # a key parallel stages write needs a reducer
stages:                           # node name -> a stage's `use` reference from the catalog
  draft: stageline.templates.builtin.blog_post:draft
start: draft                      # default: the first stage
edges: [[draft, critic_a], [aggregate, END]]
fanout: [{from: draft, to: [critic_a, critic_b], join: aggregate}]
routes: [{from: aggregate, by: stageline.architect:revise_or_go_on, to: {revise: draft, done: END}}]
loops: [{name: revisions, head: draft, max: 3, on_exhausted: END}]   # every cycle needs one
gates: {approval: {changes_to: draft}}       # the gate's one edge out is where approval goes
questions: {clarify: {questions: [{id: scope, text: "What is in scope?"}], answers: answers}}
"""


def catalog_lines(catalog: Sequence[Mapping[str, Any]]) -> str:
    """One line per composable stage: its reference, capability, description, keys."""
    lines = []
    for e in catalog:
        if not e.get("composable", True):
            continue
        keys = {k: ", ".join(e.get(k, ())) or "-" for k in ("requires", "reads", "writes")}
        lines.append(
            f"- {e['use']} [{e.get('capability') or '-'}] {e.get('description', '')} "
            f"(requires: {keys['requires']}; reads: {keys['reads']}; writes: {keys['writes']})"
        )
    return "\n".join(lines)


def draft_prompt(
    goal: str,
    catalog: Sequence[Mapping[str, Any]],
    *,
    previous: str | None = None,
    errors: Sequence[Mapping[str, Any]] = (),
    note: str | None = None,
) -> str:
    """The prompt of one round: the goal, the catalog, the format, and what went wrong."""
    parts = [
        f"Goal: {goal}",
        f"Catalog of stages:\n{catalog_lines(catalog)}",
        f"Template format:\n{FORMAT}",
    ]
    if previous and errors:
        found = "\n".join(
            f"{e.get('file')}:{e.get('line') or '?'}: {e.get('reason')}" for e in errors
        )
        parts.append(
            f"Your previous draft failed the template checks:\n{found}\n\n"
            f"The draft:\n```yaml\n{previous}\n```\nFix it and reply with the whole template."
        )
    if note:
        parts.append(f"A person asked for these changes: {note}")
    return "\n\n".join(parts)


_FENCE = re.compile(r"```(?:ya?ml)?\s*\n(.*?)```", re.DOTALL)


def extract_yaml(reply: str) -> str:
    """The YAML of a reply: a JSON object's ``yaml`` field, a fenced block, or the reply."""
    text = reply.strip()
    if text.startswith("{"):
        try:
            found = json.loads(text)
        except json.JSONDecodeError:
            found = None
        if isinstance(found, dict) and isinstance(found.get("yaml"), str):
            return str(found["yaml"]).strip() + "\n"
    fenced = _FENCE.search(text)
    return (fenced.group(1) if fenced else text).strip() + "\n"
