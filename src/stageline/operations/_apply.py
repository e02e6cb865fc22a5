"""The ``apply`` gate, then an isolated operation's result brought into the checkout.

An isolated operation leaves its result as a commit on the run's branch. With the ``apply``
input (the ``--apply`` flag) it is applied at once; otherwise the run waits at the ``apply``
gate, showing what changed. Approve applies it to the checkout's working tree (uncommitted, for
the person to review and commit); reject ends the run and leaves the branch as it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from langgraph.graph import END

from stageline.operations._worktree import Isolation, apply_to_checkout
from stageline.stages import Stage, StageContext, stage

__all__ = ["GraphBuilder", "add_apply", "apply_changes", "isolation_of"]


class GraphBuilder(Protocol):
    """What the apply step needs of a template builder (``stageline.templates.Template``):
    the runtime adds to a graph without depending on the definition layer."""

    def add_stage(self, node: str, stage_or_fn: Stage) -> Any: ...

    def add_gate(self, name: str, **options: Any) -> Any: ...

    def add_route(
        self, source: str, router: Callable[[Any], Any], targets: Mapping[str, str]
    ) -> Any: ...

    def add_edge(self, source: str, target: str) -> Any: ...


Builder = TypeVar("Builder", bound=GraphBuilder)


def isolation_of(state: Any) -> Isolation:
    """The run's worktree and branch, as an isolated operation wrote them into the state."""
    return Isolation(
        checkout=Path(state["checkout"]),
        worktree=Path(state["worktree"]),
        branch=str(state["branch"]),
        base=str(state["base_commit"]),
    )


@stage(name="operation.apply", capability="publish", cost_class="none")
async def apply_changes(state: Any, ctx: StageContext) -> dict[str, Any]:
    """Apply the branch's commit to the checkout's working tree."""
    if not state.get("commit"):
        ctx.log.info("nothing to apply: no operation left a commit on a branch")
        return {"applied": []}
    iso = isolation_of(state)
    changed = await asyncio.to_thread(apply_to_checkout, iso, str(state["commit"]))
    ctx.log.info(
        f"applied {len(changed)} file(s) from branch {iso.branch} to {iso.checkout}",
        branch=iso.branch,
        files=changed,
    )
    return {"applied": changed}


def _route(state: Any) -> str:
    return "apply" if state.get("apply") else "gate"


def add_apply(
    template: Builder,
    after: str,
    *,
    then: str = END,
    apply: Stage = apply_changes,
    show: Sequence[str] = ("branch", "changes"),
) -> Builder:
    """``after`` -> (the ``apply`` gate, unless the ``apply`` input) -> ``apply_changes`` ->
    ``then``. ``after`` is the last isolated operation; the state must extend
    ``OperationInputs``. ``apply`` is the step that applies (default: the branch's changes
    into the checkout); the gate shows the state keys ``show``."""
    template.add_stage("apply_changes", apply)
    template.add_gate("apply", show=list(show), on_deadline="park")
    template.add_route(after, _route, {"apply": "apply_changes", "gate": "apply"})
    template.add_edge("apply", "apply_changes")
    if then != END:
        template.add_edge("apply_changes", then)
    return template
