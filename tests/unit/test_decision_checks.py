"""What a decision at a gate, and an answer to a question set, check before anything is
recorded, on a real SQLite file: the attempt the gate was asked in, that only a park gate is
taken over, that a deadline's defaults are not applied on a template that changed, a visit that
no longer waits, and what the refusal says when the run waits on something else or on two."""

from __future__ import annotations

import re
from typing import Any, TypedDict

import pytest

from stageline.errors import InvalidTransition, LeaseHeld, StaleDecision, UsageError
from stageline.ledger import RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    text: str
    size: dict[str, Any]
    tone: dict[str, Any]
    published: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


async def size(state: S, ctx: StageContext) -> dict[str, Any]:
    question = {"id": "q", "text": "Which size?", "default": "small"}
    asked = ctx.ask([question], turn=0, deadline=10, on_deadline="default")
    return {"size": asked["answers"]}


async def begin(state: S, ctx: StageContext) -> dict[str, Any]:
    return {}


def asks(key: str, turn: int) -> Any:
    async def body(state: S, ctx: StageContext) -> dict[str, Any]:
        asked = ctx.ask([{"id": "q", "text": f"Which {key}?"}], turn=turn)
        return {key: asked["answers"]}

    return body


def gated() -> Template:
    template = Template("checked", state=S)
    template.add_stage("write", write).add_gate("approval").add_stage("publish", publish)
    return template.add_sequence("write", "approval", "publish")


def asking(*, more: bool = False) -> Template:
    template = Template("sized", state=S).add_stage("size", size)
    if more:  # a new version of the template
        template.add_stage("publish", publish).add_edge("size", "publish")
    return template


async def test_a_gate_asked_in_an_earlier_attempt_is_stale(runner: Runner) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    await runner.ledger.transition(run_id, RunStatus.WAITING, attempt=2)  # the run moved on
    with pytest.raises(StaleDecision) as info:
        await runner.approve(run_id)
    assert str(info.value) == (
        "stale: gate 'approval' was asked in attempt 1, the run is at attempt 2"
    )
    assert await runner.pending(run_id) == [wait]  # nothing recorded


async def test_only_a_park_gate_is_taken_over(runner: Runner) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    with pytest.raises(InvalidTransition) as info:
        await runner.take_over(run_id)
    assert str(info.value) == (
        "gate 'approval' is not a park gate; only a parked run can be taken over "
        "(approve or reject)"
    )
    assert await runner.pending(run_id) == [wait]


async def test_the_sweeper_does_not_answer_with_defaults_on_a_template_that_changed(
    runner: Runner,
) -> None:
    run_id = (await runner.start(asking(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    runner.load(asking(more=True))
    swept = await runner.sweep(now=wait.deadline_at + 1)
    assert [s["step"] for s in swept] == ["remind", "escalate", "default"]
    outcome = swept[-1]["outcome"]
    assert outcome.startswith("error: ") and "the template is now" in outcome
    assert (await runner.ledger.get_run(run_id)).status is RunStatus.WAITING
    [still] = await runner.ledger.waits(run_id)
    assert still.status is WaitStatus.PENDING and still.response is None


async def test_a_visit_that_no_longer_waits_is_stale_saying_why(runner: Runner) -> None:
    for reason, said in ((None, "closed"), ("asked again", "closed: asked again")):
        run_id = (await runner.start(gated(), {})).run.run_id
        [wait] = await runner.pending(run_id)
        await runner.ledger.settle_wait(
            run_id,
            wait.wait_id,
            wait.round,
            WaitStatus.CLOSED,
            reason=reason,
            expect=(WaitStatus.PENDING,),
        )
        with pytest.raises(StaleDecision) as info:
            await runner.approve(run_id, wait_id=wait.wait_id)
        assert str(info.value) == (
            f"gate 'approval' of run {run_id} is no longer waiting ({said}); look again with "
            f"`stageline pending {run_id}`"
        )


async def test_a_decision_where_nothing_of_its_kind_waits_names_what_does(
    runner: Runner,
) -> None:
    both = Template("two_gates", state=S).add_stage("begin", begin)
    both.add_gate("legal").add_gate("style").add_stage("publish", publish)
    both.add_fanout("begin", ["legal", "style"], join="publish")
    run_id = (await runner.start(both, {})).run.run_id
    with pytest.raises(InvalidTransition) as info:
        await runner.respond(run_id, "yes")
    assert str(info.value) in {
        f"run {run_id} is not waiting at a interrupt (it waits on: gate {a}, gate {b})"
        for a, b in (("legal", "style"), ("style", "legal"))
    }


async def test_a_run_marked_waiting_with_nothing_pending_says_so(runner: Runner) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    await runner.approve(run_id)
    await runner.ledger.transition(run_id, RunStatus.WAITING)  # written behind the runner's back
    with pytest.raises(InvalidTransition) as info:
        await runner.approve(run_id)
    assert str(info.value) == f"run {run_id} is not waiting at a gate (it waits on: nothing)"


async def test_of_two_question_sets_waiting_the_answer_must_name_one(runner: Runner) -> None:
    template = Template("two_questions", state=S).add_stage("begin", begin)
    template.add_stage("size", asks("size", 0)).add_stage("tone", asks("tone", 1))
    template.add_fanout("begin", ["size", "tone"])
    run_id = (await runner.start(template, {})).run.run_id
    asked = await runner.pending(run_id)
    with pytest.raises(UsageError) as info:
        await runner.answer(run_id, {"q": "x"})
    said = re.fullmatch(
        rf"run {run_id} waits at 2 question sets \((\S+), (\S+)\); say which with --question",
        str(info.value),
    )
    assert said is not None
    assert sorted(said.groups()) == sorted(w.wait_id for w in asked)
    assert await runner.pending(run_id) == asked  # nothing recorded


async def test_an_answer_to_a_run_that_ended_past_a_gate_is_refused_not_already_decided(
    runner: Runner,
) -> None:
    run_id = (await runner.start(gated(), {})).run.run_id
    await runner.approve(run_id, actor="ann")  # the gate's decision is not the interrupt's
    with pytest.raises(InvalidTransition) as info:
        await runner.respond(run_id, "yes")
    assert str(info.value) == f"run {run_id} is succeeded, not waiting for a person"


@pytest.mark.parametrize("kind", ["gate", "question"])
async def test_a_decision_on_a_run_leased_elsewhere_is_recorded_then_rolled_back(
    runner: Runner, kind: str
) -> None:
    """The decision and the run's claim share a transaction; when the claim is refused (another
    process holds the lease) the decision is recorded on its own, then rolled back with why,
    and the wait is asked again: the refused attempt stays on record."""
    template = gated() if kind == "gate" else asking()
    run_id = (await runner.start(template, {})).run.run_id
    await runner.ledger.acquire_lease(run_id, "another process", 600)
    with pytest.raises(LeaseHeld):
        if kind == "gate":
            await runner.approve(run_id, actor="ann", note="ship it")
        else:
            await runner.answer(run_id, {"q": "large"}, actor="ann")
    first, again = await runner.ledger.waits(run_id)
    assert (first.round, first.status, first.actor) == (1, WaitStatus.ROLLED_BACK, "ann")
    assert first.response is not None and first.response["actor"] == "ann"
    said = "approve" if kind == "gate" else "answered"
    if kind == "gate":
        assert first.response["decision"] == "approve"
    else:
        assert first.response["answers"] == {"q": "large"}
    assert (again.round, again.status) == (2, WaitStatus.PENDING)
    events = [(e.kind, e.message) for e in await runner.ledger.events(run_id)]
    decided = [m for k, m in events if k.endswith((".decided", ".answered"))]
    assert len(decided) == 1 and f": {said} by ann" in decided[0]
    [rolled] = [m for k, m in events if k.endswith(".rolled_back")]
    assert "the run could not be resumed (" in rolled and f"the {said} is rolled back" in rolled
