"""A decision binds to the visit of the gate the person saw (``wait_id``, or what waited at
``seen_at``), on a real SQLite file: one made on a visit that was decided meanwhile names
the decision that won, even when the run has come back to the gate since."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import AlreadyDecided, InvalidTransition, StaleDecision, UsageError
from stageline.ledger import RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    text: str
    feedback: str
    answers: dict[str, Any]
    published: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft " + state.get("feedback", "")}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


TEMPLATE = Template("binding", state=S)
TEMPLATE.add_stage("write", write)
TEMPLATE.add_gate("approval", changes_to="write")
TEMPLATE.add_stage("publish", publish)
TEMPLATE.add_sequence("write", "approval", "publish")


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


async def first_visit(runner: Runner) -> tuple[str, Any]:
    run_id = (await runner.start(TEMPLATE, {})).run.run_id
    [wait] = await runner.pending(run_id)
    return run_id, wait


async def test_a_decision_on_the_visit_shown_is_applied(runner: Runner) -> None:
    run_id, wait = await first_visit(runner)
    done = await runner.approve(run_id, wait_id=wait.wait_id, actor="ann")
    assert done.status is RunStatus.SUCCEEDED
    [applied] = await runner.ledger.waits(run_id)
    assert (applied.wait_id, applied.status, applied.actor) == (
        wait.wait_id,
        WaitStatus.APPLIED,
        "ann",
    )


async def test_a_visit_the_run_never_had_is_refused(runner: Runner) -> None:
    run_id, _ = await first_visit(runner)
    with pytest.raises(InvalidTransition, match=f"run {run_id} has no gate wait 'nope'"):
        await runner.approve(run_id, wait_id="nope")
    assert len(await runner.pending(run_id)) == 1  # nothing recorded


async def test_a_decision_on_an_earlier_visit_names_the_one_that_won(runner: Runner) -> None:
    run_id, first = await first_visit(runner)
    looked = first.requested_at  # when the second person looked: the first visit waited
    back = await runner.request_changes(run_id, note="shorter", actor="ann")
    [second] = back.waiting
    assert second.wait_id != first.wait_id and second.requested_at > looked
    for bound in ({"wait_id": first.wait_id}, {"seen_at": looked}):
        with pytest.raises(AlreadyDecided, match="already sent back for changes by ann"):
            await runner.approve(run_id, actor="bob", **bound)
    assert await runner.pending(run_id) == [second]  # the second visit still waits
    # Whoever looked at the second visit decides it.
    done = await runner.reject(run_id, seen_at=second.requested_at, actor="bob")
    assert done.status is RunStatus.REJECTED


async def test_a_look_before_any_visit_decides_what_waits_now(runner: Runner) -> None:
    run_id, wait = await first_visit(runner)
    done = await runner.approve(run_id, seen_at=wait.requested_at - 60)
    assert done.status is RunStatus.SUCCEEDED


async def test_a_look_at_a_run_that_no_longer_waits_says_who_came_first(runner: Runner) -> None:
    run_id, wait = await first_visit(runner)
    await runner.approve(run_id, actor="ann")
    with pytest.raises(AlreadyDecided, match="already approved by ann"):
        await runner.reject(run_id, seen_at=wait.requested_at, actor="bob")


async def test_a_visit_closed_without_a_decision_is_stale(runner: Runner) -> None:
    run_id, wait = await first_visit(runner)
    await runner.cancel(run_id)
    with pytest.raises(StaleDecision) as raised:
        await runner.approve(run_id, wait_id=wait.wait_id)
    assert str(raised.value) == (
        f"gate 'approval' of run {run_id} is no longer waiting (closed: the run was "
        f"cancelled); look again with `stageline pending {run_id}`"
    )


async def test_a_gate_named_wrong_is_refused_listing_what_waits(runner: Runner) -> None:
    run_id, _ = await first_visit(runner)
    with pytest.raises(InvalidTransition) as raised:
        await runner.approve(run_id, gate="legal")
    assert str(raised.value) == (
        f"run {run_id} is not waiting at a gate 'legal' (it waits on: gate approval)"
    )
    with pytest.raises(InvalidTransition, match="not waiting at a question set "):
        await runner.answer(run_id, {"q1": "x"})
    with pytest.raises(UsageError, match="needs a note"):
        await runner.request_changes(run_id, note="")


PARALLEL = Template("binding_parallel", state=S)
PARALLEL.add_stage("write", write).add_gate("legal").add_gate("brand")
PARALLEL.add_stage("publish", publish)
PARALLEL.add_fanout("write", ["legal", "brand"])
PARALLEL.add_edge("legal", "publish")


async def test_a_look_at_parallel_gates_binds_to_the_one_named(runner: Runner) -> None:
    run_id = (await runner.start(PARALLEL, {})).run.run_id
    looked = max(w.requested_at for w in await runner.pending(run_id))
    with pytest.raises(UsageError) as raised:
        await runner.approve(run_id, seen_at=looked)
    names = ", ".join(w.name for w in await runner.pending(run_id))
    assert str(raised.value) == f"run {run_id} waits at 2 gates ({names}); say which with --gate"
    half = await runner.approve(run_id, gate="legal", seen_at=looked)
    assert [w.name for w in half.waiting] == ["brand"]


async def test_a_decision_rolled_back_leaves_the_visit_open_to_decide(runner: Runner) -> None:
    run_id, wait = await first_visit(runner)
    await runner.ledger.decide_wait(  # its process died before the run moved on
        run_id, wait.wait_id, wait.round, response={"decision": "approve"}, actor="ghost"
    )
    assert (await runner.resume(run_id)).status is RunStatus.WAITING
    rounds = [(w.round, w.status) for w in await runner.ledger.waits(run_id)]
    assert rounds == [(1, WaitStatus.ROLLED_BACK), (2, WaitStatus.PENDING)]
    done = await runner.approve(run_id, wait_id=wait.wait_id, actor="ann")
    assert done.status is RunStatus.SUCCEEDED


async def test_a_look_binds_to_the_latest_visit_before_it(runner: Runner) -> None:
    run_id, first = await first_visit(runner)
    second = (await runner.request_changes(run_id, note="one", actor="ann")).waiting[0]
    third = (await runner.request_changes(run_id, note="two", actor="bob")).waiting[0]
    assert first.requested_at < second.requested_at < third.requested_at
    with pytest.raises(AlreadyDecided, match="sent back for changes by bob"):
        await runner.approve(run_id, seen_at=second.requested_at, actor="carol")
    with pytest.raises(AlreadyDecided, match="sent back for changes by ann"):
        await runner.approve(run_id, seen_at=first.requested_at, actor="carol")
