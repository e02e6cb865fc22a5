"""What the sweeper does when a deadline passes, on a real SQLite file: the run fails (and says
why), a person who decided first wins, a template that changed is not decided on, and each
step leaves an event a person can read."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import InvalidTransition
from stageline.ledger import EventCategory, RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.runner._deadlines import due_at
from stageline.runner._waits import what
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    text: str
    feedback: str
    answers: dict[str, Any]
    published: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


def gated(name: str = "expiring", **gate: Any) -> Template:
    template = Template(name, state=S)
    template.add_stage("write", write)
    template.add_gate("approval", **gate)
    template.add_stage("publish", publish)
    template.add_sequence("write", "approval", "publish")
    return template


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


async def waiting(runner: Runner, template: Template) -> tuple[str, Any]:
    run_id = (await runner.start(template, {})).run.run_id
    [wait] = await runner.pending(run_id)
    return run_id, wait


async def events(runner: Runner, run_id: str, kind: str) -> list[Any]:
    return [e for e in await runner.ledger.events(run_id) if e.kind == kind]


async def test_a_fail_policy_fails_the_run_saying_why(runner: Runner) -> None:
    run_id, wait = await waiting(runner, gated(deadline=60, on_deadline="fail"))
    before = time.time()
    swept = await runner.sweep(now=wait.deadline_at + 1)
    assert swept[-1] == {
        "run_id": run_id,
        "kind": "gate",
        "name": "approval",
        "wait_id": wait.wait_id,
        "step": "fail",
        "outcome": "failed",
    }
    run = await runner.ledger.get_run(run_id)
    assert run.status is RunStatus.FAILED
    assert run.error == "deadline passed at gate 'approval' (policy fail)"
    assert (run.failure_phase, run.failed_node) == ("deadline", "approval")
    assert run.finished_at is not None and run.finished_at >= before
    [expired] = await runner.ledger.waits(run_id)
    assert expired.status is WaitStatus.EXPIRED
    assert expired.reason == "deadline passed (policy fail)"
    [failed] = await events(runner, run_id, "run.failed")
    assert (failed.level, failed.category, failed.node) == (
        "critical",
        EventCategory.ERROR,
        "approval",
    )
    assert failed.message == run.error
    assert failed.data == {"failure_phase": "deadline"}
    assert await runner.pending(run_id) == []


async def test_a_deadline_never_overwrites_a_run_that_ended_meanwhile(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is cancelled between the wait's expiry and the run's failure: it stays
    cancelled."""
    run_id, wait = await waiting(runner, gated(deadline=60, on_deadline="fail"))
    settle = runner.ledger.settle_wait

    async def then_cancelled(*args: Any, **kwargs: Any) -> Any:
        settled = await settle(*args, **kwargs)
        await runner.ledger.transition(
            run_id, RunStatus.CANCELLED, expect=[RunStatus.WAITING], finished_at=time.time()
        )
        return settled

    monkeypatch.setattr(runner.ledger, "settle_wait", then_cancelled)
    with pytest.raises(InvalidTransition):
        await runner.sweep(now=wait.deadline_at + 1)
    assert (await runner.ledger.get_run(run_id)).status is RunStatus.CANCELLED


@pytest.mark.parametrize("policy", ["fail", "reject"])
async def test_a_person_who_decided_first_wins_over_the_deadline(
    runner: Runner, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """The sweeper took the last step, and a person's approval landed before it applied it."""
    run_id, wait = await waiting(runner, gated(deadline=60, on_deadline=policy))
    advance = runner.ledger.advance_policy

    async def approved_meanwhile(*args: Any, step: int, **kwargs: Any) -> bool:
        taken = await advance(*args, step=step, **kwargs)
        if step == len(wait.policy):
            await runner.ledger.decide_wait(
                run_id, wait.wait_id, wait.round, response={"decision": "approve"}, actor="ann"
            )
        return taken

    monkeypatch.setattr(runner.ledger, "advance_policy", approved_meanwhile)
    swept = await runner.sweep(now=wait.deadline_at + 1)
    assert (swept[-1]["step"], swept[-1]["outcome"]) == (policy, "decided by someone else first")
    [decided] = await runner.ledger.waits(run_id)
    assert (decided.status, decided.actor, decided.decision) == (
        WaitStatus.DECIDED,
        "ann",
        "approve",
    )
    assert (await runner.ledger.get_run(run_id)).status is RunStatus.WAITING


async def test_the_sweeper_does_not_decide_on_a_template_that_changed(
    runner: Runner,
) -> None:
    run_id, wait = await waiting(runner, gated(deadline=60, on_deadline="reject"))
    runner.load(gated(deadline=60, on_deadline="reject", changes_to="write"))  # a new version
    swept = await runner.sweep(now=wait.deadline_at + 1)
    outcome = swept[-1]["outcome"]
    assert outcome.startswith("error: ") and "the template is now" in outcome
    [failed] = await events(runner, run_id, "gate.expiry_failed")
    assert (failed.level, failed.category, failed.node) == (
        "error",
        EventCategory.ERROR,
        "approval",
    )
    assert failed.message.startswith("could not apply `reject` at the deadline: ")
    assert outcome.removeprefix("error: ") in failed.message
    assert (await runner.ledger.get_run(run_id)).status is RunStatus.WAITING
    [still] = await runner.ledger.waits(run_id)
    assert still.status is WaitStatus.PENDING and still.decision is None


async def test_each_deadline_step_leaves_an_event_saying_what_happened(runner: Runner) -> None:
    run_id, wait = await waiting(runner, gated(deadline=100, on_deadline="park"))
    assert await runner.sweep(now=wait.requested_at + 49) == []
    [remind] = await runner.sweep(now=wait.requested_at + 51)
    assert remind["step"] == "remind" and remind["outcome"] is None
    [escalate] = await runner.sweep(now=wait.requested_at + 76)
    assert escalate["step"] == "escalate"
    [park] = await runner.sweep(now=wait.deadline_at + 1)
    assert (park["step"], park["outcome"]) == ("park", "parked")
    deadline = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wait.deadline_at))
    since = time.strftime("%H:%M:%S", time.localtime(wait.requested_at))
    steps = {e.kind: e for e in await runner.ledger.events(run_id) if e.kind.startswith("gate.")}
    reminded, escalated, expired = (
        steps[f"gate.{k}"] for k in ("reminded", "escalated", "expired")
    )
    assert reminded.message == (
        f"reminder: gate 'approval' has waited since {since}; deadline {deadline}"
    )
    assert escalated.message == (
        f"escalated: gate 'approval' has waited since {since}; deadline {deadline}"
    )
    for event in (reminded, escalated):
        assert event.node == "approval"
        assert event.data == {"wait_id": wait.wait_id, "deadline_at": wait.deadline_at}
    assert (reminded.level, escalated.level, expired.level) == ("warning", "critical", "critical")
    assert expired.message == (
        "deadline passed at gate 'approval': parked: it waits for a person, with no deadline left"
    )
    assert expired.node == "approval"
    assert expired.data == {"wait_id": wait.wait_id, "policy": "park"}
    # Parked, it still waits for a person, who can decide.
    assert (await runner.approve(run_id)).status is RunStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("policy", "said"),
    [("reject", "rejecting it"), ("fail", "the run fails")],
)
async def test_the_expiry_event_names_the_policy(runner: Runner, policy: str, said: str) -> None:
    run_id, wait = await waiting(runner, gated(deadline=10, on_deadline=policy))
    await runner.sweep(now=wait.deadline_at + 1)
    [expired] = await events(runner, run_id, "gate.expired")
    assert expired.message == f"deadline passed at gate 'approval': {said}"
    assert expired.data["policy"] == policy


async def test_a_step_is_due_at_its_share_of_the_time_to_the_deadline(runner: Runner) -> None:
    run_id, wait = await waiting(runner, gated(deadline=1000, on_deadline="reject"))
    start = wait.requested_at
    assert await runner.sweep(now=start + 499) == []
    assert [s["step"] for s in await runner.sweep(now=start + 501)] == ["remind"]
    assert await runner.sweep(now=start + 749) == []
    assert [s["step"] for s in await runner.sweep(now=start + 751)] == ["escalate"]
    assert await runner.sweep(now=start + 999) == []
    [final] = await runner.sweep(now=start + 1001)
    assert (final["step"], final["outcome"]) == ("reject", "rejected")
    [decided] = await runner.ledger.waits(run_id)
    assert (decided.actor, decided.note) == ("stageline sweep", "deadline passed")


async def test_a_step_is_applied_at_the_moment_it_is_due(runner: Runner) -> None:
    _, wait = await waiting(runner, gated(deadline=100, on_deadline="park"))
    [remind] = await runner.sweep(now=due_at(wait, 0))
    assert remind["step"] == "remind"


async def test_a_wait_another_sweeper_took_does_not_stop_the_sweep(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    first_id, first = await waiting(runner, gated(deadline=10, on_deadline="park"))
    second_id, second = await waiting(runner, gated(deadline=10, on_deadline="park"))
    advance = runner.ledger.advance_policy

    async def first_taken(run_id: str, *args: Any, **kwargs: Any) -> bool:
        if run_id == first_id:
            return False  # another sweeper applied it first
        return await advance(run_id, *args, **kwargs)

    monkeypatch.setattr(runner.ledger, "advance_policy", first_taken)
    swept = await runner.sweep(now=max(first.deadline_at, second.deadline_at) + 1)
    assert [(s["run_id"], s["step"]) for s in swept] == [
        (second_id, "remind"),
        (second_id, "escalate"),
        (second_id, "park"),
    ]


class Q(TypedDict, total=False):
    size: dict[str, Any]
    tone: dict[str, Any]


async def begin(state: Q, ctx: StageContext) -> dict[str, Any]:
    return {}


def asks(key: str, turn: int, default: str) -> Any:
    async def body(state: Q, ctx: StageContext) -> dict[str, Any]:
        question = {"id": "q", "text": f"Which {key}?", "default": default}
        asked = ctx.ask([question], turn=turn, deadline=10, on_deadline="default")
        return {key: asked["answers"]}

    return body


async def test_two_question_sets_past_their_deadline_each_take_their_defaults(
    runner: Runner,
) -> None:
    """The sweeper answers the very set whose deadline passed, even when the run waits on
    two at once."""
    template = Template("two_questions", state=Q)
    template.add_stage("begin", begin)
    template.add_stage("size", asks("size", 0, "small")).add_stage("tone", asks("tone", 1, "dry"))
    template.add_fanout("begin", ["size", "tone"])
    run_id = (await runner.start(template, {})).run.run_id
    asked = await runner.pending(run_id)
    assert len(asked) == 2
    swept = await runner.sweep(now=max(w.deadline_at or 0 for w in asked) + 1)
    defaults = [s for s in swept if s["step"] == "default"]
    assert [s["outcome"] for s in defaults] == ["waiting", "succeeded"]
    state = (await runner.status(run_id)).state
    assert (state["size"], state["tone"]) == ({"q": "small"}, {"q": "dry"})
    expired = [e for e in await runner.ledger.events(run_id) if e.kind == "question.expired"]
    assert {e.message for e in expired} == {
        f"deadline passed at {what(w)}: answering with the defaults" for w in asked
    }
