"""The built-in ``compose`` template: the architect as a durable pipeline.

``draft`` asks the run's model for a template (the goal, the catalog, the format, and the last
check's errors), ``check`` checks it as any YAML template is checked, without writing it; a
failed check goes back to ``draft`` at most ``ARCHITECT_ROUNDS`` times. A draft that passes is
written by ``write``, after an approval gate when the run asked for one (``approve``). Every
round's draft and errors stay in the run's state (``rounds``) and ledger.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, Required, TypedDict

from stageline.architect._compose import check_yaml
from stageline.architect._drafting import SYSTEM, draft_prompt, extract_yaml
from stageline.errors import RunError, TemplateError
from stageline.stages import StageContext, register_stage, stage
from stageline.templates import Template

__all__ = ["ARCHITECT_ROUNDS", "ComposeState", "template"]

ARCHITECT_ROUNDS = 3
"""Drafts the model may make before the run fails."""


class ComposeState(TypedDict, total=False):
    goal: Required[str]
    target: Required[str]
    """The template file to write (``.yaml``)."""
    catalog: list[dict[str, Any]]
    """The stage catalog as ``CatalogEntry.to_dict()`` gives it."""
    approve: bool
    """Wait for a person's approval before writing the file."""
    draft: str
    errors: list[dict[str, Any]]
    """The last check's errors: ``file``, ``line``, ``reason``."""
    valid: bool
    rounds: Annotated[list[dict[str, Any]], operator.add]
    feedback: str
    path: str


@stage(name="architect.draft", register=False, capability="planning", cost_class="high")
async def draft(state: ComposeState, ctx: StageContext) -> dict[str, Any]:
    """A template for the goal from the run's model, given the last check's errors."""
    prompt = draft_prompt(
        state["goal"],
        state.get("catalog") or [],
        previous=state.get("draft"),
        errors=state.get("errors") or [],
        note=state.get("feedback") or None,
    )
    done = await ctx.model.complete(prompt, system=SYSTEM)
    ctx.metric("input_tokens", done.input_tokens)
    ctx.metric("output_tokens", done.output_tokens)
    return {"draft": extract_yaml(done.text), "feedback": ""}


def _check(text: str, target: str, *, write: bool) -> list[dict[str, Any]]:
    try:
        check_yaml(text, Path(target), write=write)
    except TemplateError as exc:
        return [{"file": exc.source or target, "line": exc.line, "reason": exc.reason}]
    return []


@stage(name="architect.check", register=False, capability="review", cost_class="none")
async def check(state: ComposeState, ctx: StageContext) -> dict[str, Any]:
    """The draft checked as any YAML template (file, line, reason); nothing is written."""
    errors = _check(state.get("draft", ""), state["target"], write=False)
    number = len(state.get("rounds") or []) + 1
    for e in errors:
        ctx.log.info(f"draft {number} failed: {e['file']}:{e['line']}: {e['reason']}")
    return {
        "errors": errors,
        "valid": not errors,
        "rounds": [{"round": number, "draft": state.get("draft", ""), "errors": errors}],
    }


@stage(name="architect.write", register=False, capability="publish", cost_class="none")
async def write(state: ComposeState, ctx: StageContext) -> dict[str, Any]:
    """The checked draft written to the target file."""
    errors = _check(state["draft"], state["target"], write=True)
    if errors:  # the file changed under it, or a stage went away: say where
        e = errors[0]
        raise RunError(f"{e['file']}:{e['line']}: {e['reason']}")
    ctx.log.info(f"wrote {state['target']}")
    return {"path": state["target"]}


@stage(name="architect.exhausted", register=False, capability="escalation", cost_class="none")
async def exhausted(state: ComposeState, ctx: StageContext) -> dict[str, Any]:
    """Fails the run: no draft passed the checks in the rounds allowed."""
    last = (state.get("errors") or [{}])[0]
    raise RunError(
        f"no draft passed the template checks in {ARCHITECT_ROUNDS} rounds; the last: "
        f"{last.get('file')}:{last.get('line')}: {last.get('reason')}"
    )


# Listed in the catalog, never composed into other templates (``composable`` False).
draft, check, write, exhausted = (
    register_stage(made.with_options(metadata={"composable": False}))
    for made in (draft, check, write, exhausted)
)


def after_check(state: ComposeState) -> str:
    """Back to ``draft`` with the errors, or on to the gate or the file."""
    if not state.get("valid"):
        return "draft"
    return "approval" if state.get("approve") else "write"


template = Template(
    "compose",
    state=ComposeState,
    version="1",
    description="The architect: a model drafts a template for a goal over the stage catalog; "
    "each draft is checked, its errors go back to the model, the first that passes is written.",
)
template.require_input("goal", "what the pipeline is for")
template.require_input("target", "the template file to write")
template.add_stage("draft", draft).add_stage("check", check)
template.add_stage("write", write).add_stage("exhausted", exhausted)
# The loop first: the gate's changes go to `draft`, so they count in its loop.
template.add_loop("drafts", head="draft", max_iterations=ARCHITECT_ROUNDS, on_exhausted="exhausted")
template.add_gate("approval", changes_to="draft", show=("draft",), max_changes=3)
template.add_edge("draft", "check")
template.add_route("check", after_check, ["draft", "approval", "write"])
template.add_edge("approval", "write")
