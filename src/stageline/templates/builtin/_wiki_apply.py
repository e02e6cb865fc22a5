"""The end of every wiki template: the ``apply`` gate, then the result brought into the checkout.

The operation left its result as a commit on the run's branch. With the ``apply`` input (the
``--apply`` flag) it is applied at once; otherwise the run waits at the ``apply`` gate, showing
what changed. Approve applies it to the checkout's working tree (uncommitted, for the person to
review and commit); reject ends the run and leaves the branch as it is.
"""

from __future__ import annotations

import asyncio
from typing import Any

from stageline.operations import apply_to_checkout
from stageline.stages import StageContext, stage
from stageline.templates._builder import Template
from stageline.templates.builtin._checks import (
    git_folder,
    harness_spec,
    path_input,
    required_text,
)
from stageline.templates.builtin._wiki import isolation_of

__all__ = ["add_apply"]


@stage(name="wiki.apply", capability="publish", cost_class="none")
async def apply_changes(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Apply the branch's commit to the checkout (the wiki folder only)."""
    iso = isolation_of(state)
    only = [str(state["wiki_rel"])] if state.get("wiki_rel") else []
    changed = await asyncio.to_thread(apply_to_checkout, iso, str(state["commit"]), only)
    ctx.log.info(
        f"applied {len(changed)} file(s) from branch {iso.branch} to {iso.checkout}",
        branch=iso.branch,
        files=changed,
    )
    return {"applied": changed}


def _route(state: Any) -> str:
    return "apply" if state.get("apply") else "gate"


def add_apply(template: Template, after: str) -> Template:
    """``after`` -> (``apply`` gate unless the ``apply`` input) -> ``apply_changes``; and the
    input checks every wiki template makes before a run exists."""
    template.add_input_check(required_text("wiki", "the wiki folder"))
    template.add_input_check(path_input("wiki", kind="folder", must_exist=False))
    template.add_input_check(git_folder("wiki", needs_commit=True))
    template.add_input_check(harness_spec)
    template.add_stage("apply_changes", apply_changes)
    template.add_gate("apply", show=["branch", "changes"], on_deadline="park")
    template.add_route(after, _route, {"apply": "apply_changes", "gate": "apply"})
    template.add_edge("apply", "apply_changes")
    return template
