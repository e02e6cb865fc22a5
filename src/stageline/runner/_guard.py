"""What a state write may never do: carry a run past a gate or question without a decision.

DESIGN.md "Waits from every door": only a recorded decision or answer moves a run past a gate,
a question or an ``interrupt()``. So a run that waits for a person takes no state write at all
(it is decided or answered instead), and a write to a failed run or into a fork is written as
a node that ran *before* every gate or question the run passed on its way to that checkpoint:
from there the graph reaches those gates again, and they ask again, on the new state. A write
as the gate itself, as a node past it, or as one that never ran there, would skip them.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from stageline.errors import InvalidTransition, WaitsForPerson
from stageline.ledger import Run, Wait, WaitKind, WaitStatus
from stageline.runner._wait_pick import ci_rule

if TYPE_CHECKING:
    from stageline.ledger import LedgerStore
    from stageline.runner._snapshots import Snap
    from stageline.templates import Template

__all__ = ["check_writers", "decision_route", "human_nodes", "waits_for_person"]

_START = "__start__"
"""LangGraph's input node: a write as it runs the whole graph again, every gate included."""


def decision_route(run_id: str, kind: WaitKind) -> str:
    """Where a person decides (gate) or answers (question, interrupt) the wait, over HTTP."""
    verb = {WaitKind.GATE: "decide", WaitKind.INTERRUPT: "respond"}.get(kind, "answer")
    return f"POST /v1/runs/{run_id}/{verb}"


def waits_for_person(run: Run, waits: Sequence[Wait], doing: str) -> WaitsForPerson:
    """The refusal of ``doing`` (e.g. "its state cannot be changed") on a run that waits for a
    person, naming what it waits on and the route that decides it."""
    pending = [w for w in waits if w.status is WaitStatus.PENDING]
    wait = pending[0] if pending else None
    kind = wait.kind if wait is not None else WaitKind.GATE
    name = wait.name if wait is not None else "a person"
    route = decision_route(run.run_id, kind)
    if kind is WaitKind.CI:  # no person's to give: the forge completes it
        assert wait is not None
        return WaitsForPerson(
            f"{ci_rule(run.run_id, wait)}, so {doing}; to stop the run, cancel it "
            f"(`stageline cancel {run.run_id}`)",
            run_id=run.run_id,
            kind=str(kind),
            name=name,
            route=f"POST /v1/runs/{run.run_id}/cancel",
        )
    noun = {WaitKind.GATE: "gate", WaitKind.INTERRUPT: "interrupt"}.get(kind, "question set")
    said = f"{noun} {name!r}"
    how = "decide" if kind is WaitKind.GATE else "answer"
    cli = {WaitKind.GATE: "approve|reject", WaitKind.INTERRUPT: "respond"}.get(kind, "answer")
    return WaitsForPerson(
        f"run {run.run_id} waits for a person at {said} ({run.status}), so {doing}: only a "
        f"recorded decision moves it on; {how} with {route} (or `stageline {cli} {run.run_id}`)",
        run_id=run.run_id,
        kind=str(kind),
        name=name,
        route=route,
    )


async def human_nodes(ledger: LedgerStore, made: Template, run_id: str) -> set[str]:
    """The nodes that ask a person: the template's gates and questions, and every node that
    asked in the run (a plain ``interrupt()`` of a LangGraph graph too)."""
    asked = {w.node for w in await ledger.waits(run_id)}
    return {*made.gates, *made.questions, *asked}


def _chain(snaps: Sequence[Snap], base: Snap) -> list[Snap]:
    """The checkpoints that led to ``base`` (its own line, oldest first)."""
    by_id = {s.info.checkpoint_id: s for s in snaps}
    chain: list[Snap] = []
    cursor: Snap | None = base
    while cursor is not None and len(chain) <= len(snaps):
        chain.append(cursor)
        cursor = by_id.get(cursor.info.parent_id or "")
    chain.reverse()
    return chain


def check_writers(
    snaps: Sequence[Snap],
    base: Snap,
    writers: Sequence[str],
    human: Collection[str],
    *,
    run_id: str,
    doing: str,
) -> None:
    """Refuse (``InvalidTransition``) a write to ``base`` as ``writers`` that would skip a gate
    or question node (``human``): each writer must have run on the way to ``base``, before the
    last gate or question that was passed there, and be none of them."""
    chain = _chain(snaps, base)
    passed = [i for i, s in enumerate(chain) if set(s.info.nodes) & set(human)]
    last = passed[-1] if passed else len(chain)
    gate = (
        " and ".join(repr(n) for n in sorted(set(chain[last].info.nodes) & set(human)))
        if passed
        else "a gate or question"
    )
    before = [n for s in chain[:last] for n in s.info.nodes if n not in human]
    hint = (
        f"write it as a node that ran before {gate} (as_node={before[-1]!r}) so it asks again"
        if before
        else f"fork the run from before {gate}"
    )
    for writer in writers:
        if writer == _START:
            continue
        ran = [i for i, s in enumerate(chain) if writer in s.info.nodes]
        if writer in human:
            raise InvalidTransition(
                f"{doing} as {writer!r}, a gate or question node of run {run_id}, would pass "
                f"it without a recorded decision; {hint}"
            )
        if not ran:
            raise InvalidTransition(
                f"{doing} as {writer!r}, a node that has not run on the way to this checkpoint "
                f"of run {run_id}, could skip {gate} without a recorded decision; {hint}"
            )
        if passed and ran[-1] >= last:
            raise InvalidTransition(
                f"{doing} as {writer!r} would carry the new state past {gate} of run {run_id}, "
                f"which was decided on the state as it was, without a recorded decision; {hint}"
            )
