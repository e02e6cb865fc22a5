"""Gates over the in-memory runner: decisions, routes, staleness, rollback, deadlines."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest
from langgraph.types import Command

from stageline.config import Settings
from stageline.errors import (
    AlreadyDecided,
    InputError,
    InvalidTransition,
    StaleDecision,
    TemplateError,
    UsageError,
)
from stageline.ledger import RunStatus, WaitKind, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.testing import RecordingSink, memory_runner

SEEN: list[dict[str, Any]] = []
"""What the ``write`` node was given, each time it ran."""


class S(TypedDict, total=False):
    text: str
    feedback: str
    n: int
    published: bool
    archived: bool


@pytest.fixture(autouse=True)
def _reset() -> None:
    SEEN.clear()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
async def runner(memory_settings: Settings, sink: RecordingSink) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings, sinks=(sink,)) as opened:
        yield opened


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    SEEN.append(dict(state))
    n = state.get("n", 0) + 1
    return {"text": f"draft {n}", "n": n}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


async def archive(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"archived": True}


def gated(name: str = "gated", **gate: Any) -> Template:
    template = Template(name, state=S)
    template.add_stage("write", write)
    template.add_gate("approval", show=("text",), **{"changes_to": "write", **gate})
    template.add_stage("publish", publish)
    template.add_sequence("write", "approval", "publish")
    return template


async def test_a_gate_waits_then_approval_finishes_the_run(
    runner: Runner, sink: RecordingSink
) -> None:
    first = await runner.start(gated(), {})
    assert first.status is RunStatus.WAITING
    [wait] = first.waiting
    assert (wait.kind, wait.name, wait.node, wait.attempt) == (
        WaitKind.GATE,
        "approval",
        "approval",
        1,
    )
    assert wait.payload["show"] == {"text": "draft 1"} and wait.state_hash
    assert wait.deadline_at == pytest.approx(wait.requested_at + 24 * 3600)
    assert await runner.pending() == [wait]

    done = await runner.approve(first.run.run_id, note="good", actor="ann")
    assert done.status is RunStatus.SUCCEEDED
    assert done.state == {"text": "draft 1", "n": 1, "published": True}
    [decided] = (await runner.status(first.run.run_id)).waits
    assert (decided.status, decided.decision, decided.actor, decided.note) == (
        WaitStatus.APPLIED,
        "approve",
        "ann",
        "good",
    )
    kinds = sink.kinds(first.run.run_id)
    assert (
        kinds.index("gate.waiting")
        < kinds.index("run.waiting")
        < kinds.index("gate.decided")
        < kinds.index("run.resumed")
        < kinds.index("run.succeeded")
    )
    assert await runner.pending() == []


async def test_changes_go_back_with_the_note_and_are_bounded(runner: Runner) -> None:
    run_id = (await runner.start(gated(max_changes=1), {})).run.run_id
    again = await runner.request_changes(run_id, note="shorter, please")
    assert again.status is RunStatus.WAITING
    assert SEEN[-1]["feedback"] == "shorter, please"  # the node's input has the note
    assert again.state["text"] == "draft 2"
    [wait] = again.waiting
    assert wait.payload["changes_left"] == 0
    with pytest.raises(InvalidTransition, match="no rounds of changes left"):
        await runner.request_changes(run_id, note="more")
    with pytest.raises(UsageError, match="needs a note"):
        await runner.request_changes(run_id, note=" ")
    assert (await runner.approve(run_id)).status is RunStatus.SUCCEEDED
    rounds = [(w.decision, w.status) for w in (await runner.status(run_id)).waits]
    assert rounds == [("changes", WaitStatus.APPLIED), ("approve", WaitStatus.APPLIED)]


async def test_reject_ends_the_run_rejected_or_takes_the_reject_route(
    runner: Runner, sink: RecordingSink
) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    rejected = await runner.reject(run_id, note="off topic", actor="bob")
    assert rejected.status is RunStatus.REJECTED and rejected.run.finished_at
    assert "published" not in rejected.state
    [event] = [e for e in sink.events if e.run_id == run_id and e.kind == "run.rejected"]
    assert "bob" in event.message and "off topic" in event.message

    routed = gated("routed", reject_to="archive")
    routed.add_stage("archive", archive)
    run_id = (await runner.start(routed, {})).run.run_id
    done = await runner.reject(run_id)
    assert done.status is RunStatus.SUCCEEDED
    assert done.state["archived"] is True and "published" not in done.state


async def test_a_second_decision_is_a_conflict_and_nothing_else_is_recorded(runner: Runner) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    await runner.approve(run_id, actor="ann")
    with pytest.raises(AlreadyDecided, match="already approved by ann") as info:
        await runner.reject(run_id, gate="approval", actor="bob")
    assert info.value.exit_code == 5
    assert len((await runner.status(run_id)).waits) == 1


async def test_a_decision_for_another_attempt_or_state_is_refused_as_stale(runner: Runner) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    with pytest.raises(StaleDecision, match="attempt 0"):
        await runner.approve(run_id, attempt=0)
    with pytest.raises(StaleDecision, match="state"):
        await runner.approve(run_id, state_hash="0" * 16)
    assert await runner.pending(run_id) == [wait]  # nothing recorded
    done = await runner.approve(run_id, attempt=1, state_hash=wait.state_hash)
    assert done.status is RunStatus.SUCCEEDED


async def test_an_old_approval_never_passes_a_retried_run(runner: Runner) -> None:
    """Attempt 1 waits at the gate; its deadline fails the run; retry is attempt 2 and asks
    again; the approval made for attempt 1 is refused as stale."""
    run_id = (await runner.start(gated(on_deadline="fail", deadline=60), {})).run.run_id
    [first] = await runner.pending(run_id)
    swept = await runner.sweep(now=time.time() + 61)
    assert [e["step"] for e in swept] == ["remind", "escalate", "fail"]
    failed = await runner.ledger.get_run(run_id)
    assert (failed.status, failed.failure_phase, failed.failed_node) == (
        RunStatus.FAILED,
        "deadline",
        "approval",
    )

    retried = await runner.retry(run_id)
    assert retried.status is RunStatus.WAITING and retried.run.attempt == 2
    [second] = retried.waiting
    assert (second.wait_id, second.round, second.attempt) == (first.wait_id, 2, 2)
    with pytest.raises(StaleDecision, match="attempt 1, but the run now waits there in attempt 2"):
        await runner.approve(run_id, attempt=first.attempt, state_hash=first.state_hash)
    assert (await runner.approve(run_id, attempt=2)).status is RunStatus.SUCCEEDED
    statuses = [(w.attempt, w.status) for w in (await runner.status(run_id)).waits]
    assert statuses == [(1, WaitStatus.EXPIRED), (2, WaitStatus.APPLIED)]


async def test_the_gate_itself_refuses_a_stale_decision_and_asks_again(
    runner: Runner, sink: RecordingSink
) -> None:
    """Belt and braces: a decision for another attempt that reaches the node (a rollback that
    was missed) does not pass the gate."""
    template = gated()
    run = (await runner.start(template, {})).run
    [wait] = await runner.pending(run.run_id)
    stale = {
        "decision": "approve",
        "attempt": 7,
        "state_hash": wait.state_hash,
        "token": wait.token,
        "actor": "mallory",
    }
    await runner.ledger.decide_wait(
        run.run_id, wait.wait_id, wait.round, response=stale, actor="mallory"
    )
    holder = await runner.advancer.claim(run, template, "run.resumed")
    after = await runner.advancer.advance(
        run, template, Command(resume={wait.interrupt_id: stale}), {}, holder=holder
    )
    assert after.status is RunStatus.WAITING and "published" not in after.state
    refused, asked = (await runner.status(run.run_id)).waits
    assert refused.status is WaitStatus.REFUSED
    assert refused.reason and "stale: the decision is for attempt 7" in refused.reason
    assert asked.status is WaitStatus.PENDING and asked.interrupt_id != wait.interrupt_id
    assert "gate.refused" in sink.kinds(run.run_id)
    assert (await runner.approve(run.run_id)).status is RunStatus.SUCCEEDED


async def test_a_resume_that_raises_before_the_gate_rolls_the_decision_back(
    runner: Runner, sink: RecordingSink, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    saver = runner.backend.saver
    real = saver.aget_tuple
    calls = {"n": 0}

    async def broken_once(config: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the first read checks the checkpoint; the second is the resume's
            raise RuntimeError("checkpointer unavailable")
        return await real(config)

    monkeypatch.setattr(saver, "aget_tuple", broken_once)
    after = await runner.approve(run_id, actor="ann")
    assert after.status is RunStatus.WAITING
    rolled, again = (await runner.status(run_id)).waits
    assert (rolled.status, rolled.decision, rolled.round) == (WaitStatus.ROLLED_BACK, "approve", 1)
    assert rolled.reason and "checkpointer unavailable" in rolled.reason
    assert (again.status, again.round, again.wait_id) == (WaitStatus.PENDING, 2, rolled.wait_id)
    kinds = sink.kinds(run_id)
    assert kinds[-2:] == ["gate.rolled_back", "run.waiting"]
    assert "checkpointer unavailable" in sink.events[-2].message
    assert (await runner.approve(run_id)).status is RunStatus.SUCCEEDED


async def test_a_decision_whose_process_died_is_rolled_back_when_the_run_is_resumed(
    runner: Runner,
) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    await runner.ledger.decide_wait(
        run_id, wait.wait_id, wait.round, response={"decision": "approve"}, actor="ghost"
    )
    assert (await runner.resume(run_id)).status is RunStatus.WAITING
    ghost, again = (await runner.status(run_id)).waits
    assert ghost.status is WaitStatus.ROLLED_BACK and again.status is WaitStatus.PENDING
    assert (await runner.approve(run_id)).status is RunStatus.SUCCEEDED


async def test_cancelling_a_waiting_run_closes_what_it_waits_on(runner: Runner) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    await runner.cancel(run_id)
    [closed] = (await runner.status(run_id)).waits
    assert closed.status is WaitStatus.CLOSED and await runner.pending() == []
    with pytest.raises(InvalidTransition, match="cancelled"):
        await runner.approve(run_id)
    assert closed.reason == "the run was cancelled"

    other = (await runner.start(gated(), {})).run.run_id  # who cancelled, and why, are kept
    await runner.cancel(other, actor="ann", note="not needed")
    [closed] = (await runner.status(other)).waits
    assert closed.reason == "the run was cancelled by ann: not needed"
    [event] = [e for e in await runner.ledger.events(other) if e.kind == "run.cancelled"]
    assert event.data == {"actor": "ann", "note": "not needed"}


async def test_two_gates_in_parallel_are_decided_by_name(runner: Runner) -> None:
    template = Template("two_gates", state=S)
    template.add_stage("write", write).add_gate("legal").add_gate("brand")
    template.add_stage("publish", publish)
    template.add_fanout("write", ["legal", "brand"])
    template.add_edge("legal", "publish")
    run_id = (await runner.start(template, {})).run.run_id
    assert sorted(w.name for w in await runner.pending(run_id)) == ["brand", "legal"]
    with pytest.raises(UsageError, match="--gate"):
        await runner.approve(run_id)
    half = await runner.approve(run_id, gate="legal")
    assert half.status is RunStatus.WAITING and [w.name for w in half.waiting] == ["brand"]
    assert (await runner.approve(run_id, gate="brand")).status is RunStatus.SUCCEEDED


# -- deadlines ------------------------------------------------------------------------------


async def test_deadline_steps_come_in_order_and_once(runner: Runner, sink: RecordingSink) -> None:
    run_id = (await runner.start(gated(deadline="100s", on_deadline="reject"), {})).run.run_id
    [wait] = await runner.pending(run_id)
    assert wait.policy == ("remind", "escalate", "reject")
    t0 = wait.requested_at
    assert await runner.sweep(now=t0 + 10) == []
    assert [e["step"] for e in await runner.sweep(now=t0 + 60)] == ["remind"]
    assert await runner.sweep(now=t0 + 60) == []  # taken once
    assert [e["step"] for e in await runner.sweep(now=t0 + 80)] == ["escalate"]
    [final] = await runner.sweep(now=t0 + 101)
    assert (final["step"], final["outcome"]) == ("reject", "rejected")
    run = await runner.ledger.get_run(run_id)
    assert run.status is RunStatus.REJECTED
    kinds = [k for k in sink.kinds(run_id) if k.startswith(("gate.", "run.rejected"))]
    assert kinds == [
        "gate.waiting",
        "gate.reminded",
        "gate.escalated",
        "gate.expired",
        "gate.decided",
        "run.rejected",
    ]
    levels = {e.kind: e.level for e in sink.events if e.run_id == run_id}
    assert (levels["gate.reminded"], levels["gate.escalated"]) == ("warning", "critical")
    [decided] = (await runner.status(run_id)).waits
    assert (decided.actor, decided.decision, decided.note) == (
        "stageline sweep",
        "reject",
        "deadline passed",
    )


async def test_a_per_run_deadline_and_park(runner: Runner, sink: RecordingSink) -> None:
    run_id = (
        await runner.start(gated(deadline="2d"), {}, deadlines={"approval": "10s"})
    ).run.run_id
    [wait] = await runner.pending(run_id)
    assert wait.deadline_at == pytest.approx(wait.requested_at + 10)
    done = await runner.sweep(now=wait.requested_at + 11)
    assert [(e["step"], e["outcome"]) for e in done] == [
        ("remind", None),
        ("escalate", None),
        ("park", "parked"),
    ]
    assert (await runner.ledger.get_run(run_id)).status is RunStatus.PARKED
    parked = [e for e in sink.events if e.run_id == run_id and e.kind == "run.parked"]
    assert len(parked) == 1 and "deadline passed" in (parked[0].message or "")
    [still] = await runner.pending(run_id)  # the gate still waits for a person
    assert still.wait_id == wait.wait_id
    assert await runner.sweep(now=wait.requested_at + 1000) == []
    assert (await runner.approve(run_id)).status is RunStatus.SUCCEEDED
    with pytest.raises(InputError, match="no node 'nope'"):
        await runner.start(gated(), {}, deadlines={"nope": 5})
    with pytest.raises(UsageError, match="duration"):
        await runner.start(gated(), {}, deadlines={"approval": "soon"})


def test_gate_declarations_are_checked() -> None:
    with pytest.raises(TemplateError, match="on_deadline"):
        gated(on_deadline="default")  # a gate has no default answer
    with pytest.raises(TemplateError, match="deadline"):
        gated(deadline="-1")

    class NoFeedback(TypedDict, total=False):
        text: str

    template = Template("nf", state=NoFeedback)
    template.add_stage("write", write)
    with pytest.raises(TemplateError, match="'feedback'"):
        template.add_gate("approval", changes_to="write")
    forked = gated("forked")
    forked.add_stage("archive", archive)
    forked.add_edge("approval", "archive")
    with pytest.raises(TemplateError, match="2 edges out"):
        forked.validate()
