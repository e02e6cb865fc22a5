"""Agent Inbox's "resolve": ``threads.update_state(thread, values=None, as_node="__end__")`` on
a thread waiting for a person ends its run with a decision of its own, recorded with who asked
and the note ``resolved from Agent Inbox``; the write LangGraph would make (the thread marked
done past its interrupt) is never made, so nothing goes past a gate or question undecided.

- One gate waits and rejecting it ends the run (it has no ``reject_to``): it is rejected
  (``decide`` scope, as any reject).
- Anything else (a question set, a gate whose reject goes on elsewhere, several waits): the run
  is cancelled, which needs ``admin`` scope as ``runs.cancel`` does; each wait it closes says
  by whom and why, as does the ``run.cancelled`` event.
"""

from __future__ import annotations

from typing import Any

from fastapi import HTTPException, Request
from langgraph.graph import END

from stageline.ledger import Run, WaitKind
from stageline.runner import Runner
from stageline.server._advancer import Advancer
from stageline.server.langgraph._execute import ApiRuns
from stageline.server.langgraph._lookup import snapshot
from stageline.server.langgraph._mapping import checkpoint_json
from stageline.server.langgraph._models import UpdateState

__all__ = ["RESOLVED", "is_resolve", "resolve"]

RESOLVED = "resolved from Agent Inbox"
"""The note a resolve records."""


def is_resolve(body: UpdateState, run: Run | None) -> bool:
    """Whether ``body`` is Agent Inbox's resolve of a thread that waits for a person."""
    return (
        body.as_node == END
        and not body.values
        and run is not None
        and run.status.waits_for_person
        and body.checkpoint is None
        and body.checkpoint_id is None
    )


async def resolve(
    request: Request, runner: Runner, advancer: Advancer, run: Run, actor: str
) -> dict[str, Any]:
    """End ``run`` (waiting for a person) as resolved by ``actor``; the update's answer."""
    thread_id = run.run_id
    if ApiRuns.of(request).busy(thread_id):
        raise HTTPException(409, f"thread {thread_id} is busy")
    pending = await runner.pending(thread_id)
    if not pending:
        raise HTTPException(409, f"thread {thread_id} waits on nothing any more")
    [first, *others] = pending
    if not others and first.kind is WaitKind.GATE and first.payload.get("reject_to") is None:
        await advancer.run(
            runner.reject(
                thread_id, gate=first.name, actor=actor, attempt=first.attempt, note=RESOLVED
            )
        )
    else:
        if not request.state.token.scope.allows("admin"):
            what = ", ".join(f"{w.kind} {w.name}" for w in pending)
            raise HTTPException(
                403,
                f"token {actor!r} has scope {request.state.token.scope}; resolving thread "
                f"{thread_id} cancels its run (it waits at {what}, which no reject ends), "
                "which needs admin",
            )
        await runner.cancel(thread_id, actor=actor, note=RESOLVED)
    latest = await snapshot(runner, await runner.ledger.get_run(thread_id))
    return {"checkpoint": checkpoint_json(thread_id, latest.config if latest else None)}
