"""After each advance: what became of the decisions being applied, and what the run now waits on.

A decision or answer is written to the ledger before the resume that carries it. Once the
graph has stopped, the run's checkpoint tells whether the node took it: LangGraph keeps the
resume value with the node's writes (it passed the gate, asked its next question, or failed
after taking it). If the node never took it (the resume raised first), the decision is rolled
back and the run waits again.
"""

from __future__ import annotations

import time
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

from stageline.errors import InputError
from stageline.ledger import (
    Event,
    LedgerStore,
    Run,
    SettleRound,
    Wait,
    WaitChanges,
    WaitKind,
    WaitStatus,
)
from stageline.runner._graph_context import CONTEXT_INPUT
from stageline.runner._interrupts import Place, Policy, interrupt_places, interrupt_wait
from stageline.runner._support import _config, _describe_failure
from stageline.runner._trust_writes import human_payload
from stageline.stages import BUDGET_INPUT, parse_duration
from stageline.templates import Template

__all__ = [
    "DEADLINES_INPUT",
    "Settled",
    "graph_inputs",
    "human_payload",
    "round_event",
    "settle_one_by_one",
    "settle_waits",
    "what",
    "with_deadlines",
]

DEADLINES_INPUT = "stageline_deadlines"
"""The run input (kept with the run, never given to the graph) holding per-run deadlines."""

_RESUME, _INTERRUPT = "__resume__", "__interrupt__"  # LangGraph's pending-write channels


@dataclass(frozen=True, kw_only=True)
class Settled:
    again: str | None = None
    """Why the run waits again: a decision was rolled back."""
    rejected: Wait | None = None
    """The reject that ended the run, when a gate without a reject route took one."""
    parked: bool = False
    """The run waits at a park gate (out of rounds): its status is ``parked``."""
    taken_over: Wait | None = None
    """The takeover at a park gate that ended the run: its status is ``taken_over``."""
    where: str | None = None
    """Where the taken-over work is (its branch and worktree), when an operation left one."""
    changes: WaitChanges = field(default_factory=WaitChanges)
    """Rounds to settle and to ask, committed with the run's ending (empty once committed)."""


def round_event(wait: Wait, outcome: str, message: str) -> Event:
    """The warning that a decided round of ``wait`` did not take (``refused``,
    ``rolled_back``): the run waits there again."""
    return Event(
        run_id=wait.run_id,
        kind=f"{wait.kind}.{outcome}",
        node=wait.node,
        level="warning",
        message=message,
        data={"wait_id": wait.wait_id, "round": wait.round},
    )


def what(wait: Wait) -> str:
    """``gate 'x'`` or ``question set abc (turn 0)``, for messages."""
    if wait.kind is WaitKind.GATE:
        return f"gate {wait.name!r}"
    if wait.kind is WaitKind.INTERRUPT:
        return f"interrupt {wait.wait_id[:8]} at {wait.name!r}"
    if wait.kind is WaitKind.CI:
        return f"the CI wait at {wait.node!r}"
    return f"question set {wait.wait_id} (turn {wait.payload.get('turn', '?')})"


def _wait_from(
    run: Run, interrupt: Any, now: float, places: Mapping[str, Place], policy: Policy | None
) -> Wait | None:
    value = human_payload(getattr(interrupt, "value", None))
    if value is None:  # the graph's own interrupt(): a wait for any value
        if getattr(interrupt, "id", None) is None:
            return None
        return interrupt_wait(run, interrupt, places.get(str(interrupt.id)), now, policy)
    gate = value["kind"] == "gate"
    name = str(value["gate"] if gate else value["name"])
    by_interrupt = value["kind"] in ("gate", "ci")  # no id of their own: the interrupt's
    overrides = run.inputs.get(DEADLINES_INPUT) or {}
    seconds = float(overrides.get(name) or value.get("deadline") or 0) or None
    return Wait(
        run_id=run.run_id,
        wait_id=interrupt.id if by_interrupt else str(value["question_id"]),
        kind=WaitKind(value["kind"]),
        name=name,
        node=str(value["node"]),
        attempt=int(value["attempt"]),
        interrupt_id=interrupt.id,
        payload={k: v for k, v in value.items() if k not in ("refused",)},
        requested_at=now,
        deadline_at=None if seconds is None else now + seconds,
        policy=tuple(value.get("on_deadline") or ()),
    )


async def _checkpoint_view(
    saver: BaseCheckpointSaver[Any], run_id: str
) -> tuple[set[str] | None, set[str]]:
    """Interrupt ids still pending at the run's checkpoint (None: unreadable), and what its
    nodes have taken: response tokens, and the ids of interrupts whose task went on (it wrote
    more than its interrupt: a resume, its update, an error; a subgraph's resume is kept in
    the subgraph's own checkpoint)."""
    try:
        saved = await saver.aget_tuple(typing.cast(Any, _config(run_id)))
    except Exception:
        return None, set()
    if saved is None:
        return None, set()
    pending: set[str] = set()
    taken: set[str] = set()
    asked: dict[str, set[str]] = {}
    went_on: set[str] = set()
    for task, channel, value in saved.pending_writes or ():
        values = value if isinstance(value, list | tuple) else [value]
        if channel == _INTERRUPT:
            ids = {str(getattr(i, "id", "")) for i in values}
            pending.update(ids)
            asked.setdefault(task, set()).update(ids)
        else:
            went_on.add(task)
            if channel == _RESUME:
                taken.update(str(v.get("token")) for v in values if isinstance(v, Mapping))
    for task in went_on:
        taken.update(asked.get(task, ()))
    return pending, taken


async def settle_waits(
    ledger: LedgerStore,
    saver: BaseCheckpointSaver[Any],
    template: Template,
    run: Run,
    outcome: BaseException | str | None,
    interrupts: Sequence[Any],
    *,
    fresh: bool = False,
    graph: Any = None,
    policy: Policy | None = None,
) -> Settled:
    """What becomes of the decisions being applied, and what the run now waits on: the
    ``changes`` to commit with the run's ending (``finish_run``), and how the run ends if they
    all hold. A ``fresh`` run (created by this advance) has no waits to read. ``graph`` says
    where the graph's own interrupts were asked; ``policy`` is their deadline."""
    asks = bool(interrupts)
    if not (template.gates or template.questions or asks or run.status.waits_for_person):
        return Settled()  # nothing a person said or is asked: no read on a plain run
    run_id, now = run.run_id, time.time()
    waits = [] if fresh else await ledger.waits(run_id)
    refused = {
        str(p["refused"].get("token")): str(p["refused"].get("reason"))
        for p in (human_payload(getattr(i, "value", None)) for i in interrupts)
        if p is not None and isinstance(p.get("refused"), Mapping)
    }
    again: str | None = None
    settle: list[SettleRound] = []
    decided = [w for w in waits if w.status is WaitStatus.DECIDED]
    if decided:
        # A graph that ran to its end answered every interrupt: its last checkpoint has none
        # pending, so each decision was taken (no need to read it).
        pending: set[str] | None = set()
        taken: set[str] = set()
        if outcome is not None:
            pending, taken = await _checkpoint_view(saver, run_id)
        for wait in decided:
            if wait.token in refused:
                reason = refused[wait.token]
                settle.append(
                    SettleRound(
                        wait=wait,
                        status=WaitStatus.REFUSED,
                        reason=reason,
                        events=[
                            round_event(
                                wait,
                                "refused",
                                f"{what(wait)} refused the {_said(wait)}: {reason}; it asks again",
                            )
                        ],
                    )
                )
            elif (
                wait.token in taken
                or (wait.kind is WaitKind.INTERRUPT and wait.interrupt_id in taken)
                or (pending is not None and wait.interrupt_id not in pending)
            ):
                settle.append(SettleRound(wait=wait, status=WaitStatus.APPLIED))
            else:
                why = (
                    _describe_failure(outcome)[0]
                    if isinstance(outcome, BaseException)
                    else (f"the run stopped first ({outcome or 'it ended'})")
                )
                again = why
                settle.append(
                    SettleRound(
                        wait=wait,
                        status=WaitStatus.ROLLED_BACK,
                        reopen=True,
                        reason=why,
                        events=[
                            round_event(
                                wait,
                                "rolled_back",
                                f"the resume failed before the run passed {what(wait)}: "
                                f"{why}; the {_said(wait)} is rolled back and the run waits again",
                            )
                        ],
                    )
                )
    known = {
        (w.wait_id, w.attempt, w.interrupt_id) for w in waits if w.status is WaitStatus.PENDING
    }
    places: Mapping[str, Place] = {}
    if graph is not None and any(
        human_payload(getattr(i, "value", None)) is None for i in interrupts
    ):
        places = await interrupt_places(graph, run_id)
    asked = [
        w
        for w in (_wait_from(run, i, now, places, policy) for i in interrupts)
        if w is not None and (w.wait_id, w.attempt, w.interrupt_id) not in known
    ]
    # As the waits will stand once the changes commit (APPLIED is final: nobody moves it on).
    moved = {(c.wait.wait_id, c.wait.round): c.status for c in settle}
    after = [
        replace(w, status=moved[(w.wait_id, w.round)]) if (w.wait_id, w.round) in moved else w
        for w in waits
    ]
    rejected, taken_over = _ended_by(template, after) if outcome is None else (None, None)
    parked = any((human_payload(getattr(i, "value", None)) or {}).get("park") for i in interrupts)
    return Settled(
        again=again,
        rejected=rejected,
        parked=parked and outcome == "waiting",
        taken_over=taken_over,
        changes=WaitChanges(
            settle=settle, asked=asked, asked_events=[e for w in asked for e in _asked_events(w)]
        ),
    )


async def settle_one_by_one(
    ledger: LedgerStore,
    template: Template,
    run_id: str,
    outcome: BaseException | str | None,
    settled: Settled,
) -> Settled:
    """Commit ``settled.changes`` round by round, skipping a round someone moved on first, and
    read the waits again to see how the run ends (when one moved while the ending was made)."""
    changes = settled.changes
    for change in changes.settle:
        wait = change.wait
        await ledger.settle_wait(
            run_id,
            wait.wait_id,
            wait.round,
            change.status,
            reason=change.reason,
            reopen=change.reopen,
            events=change.events,
        )
    if changes.asked:
        await ledger.open_waits(run_id, changes.asked, events=changes.asked_events)
    rejected = taken_over = None
    if outcome is None:
        rejected, taken_over = _ended_by(template, await ledger.waits(run_id))
    return replace(settled, rejected=rejected, taken_over=taken_over, changes=WaitChanges())


def _ended_by(template: Template, waits: Sequence[Wait]) -> tuple[Wait | None, Wait | None]:
    """The latest applied reject at a gate that ends the run on one, and the latest applied
    takeover, among ``waits`` (oldest first)."""
    ending = {n for n, g in template.gates.items() if g.ends_run_on_reject}
    applied = [
        w for w in reversed(waits) if w.kind is WaitKind.GATE and w.status is WaitStatus.APPLIED
    ]
    taken_over = next((w for w in applied if w.decision == "takeover"), None)
    rejected = next((w for w in applied if w.name in ending and w.decision == "reject"), None)
    return rejected, taken_over


def _said(wait: Wait) -> str:
    return "answer" if wait.kind is not WaitKind.GATE else f"decision ({wait.decision})"


def _asked_events(wait: Wait) -> list[Event]:
    """What is said when ``wait`` is asked; at a budget gate, also that the run stopped at its
    budget (``budget.exceeded``, a kind critical channels take)."""
    asked = [_asked_event(wait)]
    over = wait.payload.get("budget")
    if wait.kind is WaitKind.GATE and isinstance(over, Mapping):
        shown = wait.payload.get("show")
        said = shown.get("budget") if isinstance(shown, Mapping) else None
        asked.append(
            Event(
                run_id=wait.run_id,
                kind="budget.exceeded",
                level="warning",
                node=wait.node,
                message=f"waiting at gate {wait.name!r}: {said or 'a budget is used up'}",
                data={"gate": wait.name, "wait_id": wait.wait_id, **dict(over)},
            )
        )
    return asked


def _asked_event(wait: Wait) -> Event:
    deadline = (
        time.strftime(" (deadline %Y-%m-%d %H:%M:%S)", time.localtime(wait.deadline_at))
        if wait.deadline_at
        else ""
    )
    if wait.kind is WaitKind.GATE:
        return Event(
            run_id=wait.run_id,
            kind="gate.waiting",
            node=wait.node,
            message=f"waiting for a decision at gate {wait.name!r}{deadline}",
            data={
                "gate": wait.name,
                "wait_id": wait.wait_id,
                "attempt": wait.attempt,
                "state_hash": wait.state_hash,
                "deadline_at": wait.deadline_at,
            },
        )
    if wait.kind is WaitKind.CI:
        ci = wait.payload.get("ci") or {}
        on = (
            f"CI run {ci['id']}"
            if ci.get("id")
            else f"the checks of {ci.get('head_sha', '?')[:12]}"
        )
        return Event(
            run_id=wait.run_id,
            kind="ci.waiting",
            node=wait.node,
            message=f"waiting on CI: {on} in {ci.get('repository')}"
            + (f" ({ci['url']})" if ci.get("url") else ""),
            data={
                "wait_id": wait.wait_id,
                "ci_run_id": ci.get("id"),
                "ci_url": ci.get("url"),
                "head_sha": ci.get("head_sha"),
                "build_round": ci.get("build_round"),
            },
        )
    if wait.kind is WaitKind.INTERRUPT:
        return Event(
            run_id=wait.run_id,
            kind="interrupt.waiting",
            node=wait.node,
            message=f"waiting for an answer to {what(wait)}{deadline}",
            data={
                "wait_id": wait.wait_id,
                "name": wait.name,
                "namespace": wait.payload.get("namespace"),
                "attempt": wait.attempt,
                "deadline_at": wait.deadline_at,
            },
        )
    count = len(wait.payload.get("question_set", {}).get("questions", []))
    return Event(
        run_id=wait.run_id,
        kind="question.asked",
        node=wait.node,
        message=f"asking {count} question(s), set {wait.wait_id}{deadline}",
        data={
            "question_id": wait.wait_id,
            "turn": wait.payload.get("turn"),
            "attempt": wait.attempt,
            "deadline_at": wait.deadline_at,
        },
    )


def graph_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A run's inputs as the graph takes them: without what stageline keeps beside them."""
    kept = (DEADLINES_INPUT, BUDGET_INPUT, CONTEXT_INPUT)
    return {k: v for k, v in inputs.items() if k not in kept}


def with_deadlines(
    template: Template, inputs: Mapping[str, Any], deadlines: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The inputs to record, with per-run deadline overrides (node name -> seconds) beside them."""
    if not deadlines:
        return dict(inputs)
    known = {*template.gates, *template.questions, *template.nodes}
    if unknown := [n for n in deadlines if n not in known]:
        raise InputError(
            f"no node {unknown[0]!r} in template {template.name!r} to give a "
            f"deadline to; it has: {', '.join(sorted(known)) or 'none'}"
        )
    seconds = {n: parse_duration(v, f"deadline of {n!r}") for n, v in deadlines.items()}
    return {**inputs, DEADLINES_INPUT: seconds}
