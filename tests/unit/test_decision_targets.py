"""Which wait a decision or answer is for, on a real SQLite file: a gate by its name or id, a
question set by its id or a prefix of it, and every check ``approve`` makes holds for
``request_changes`` and ``reject`` too."""

from __future__ import annotations

import getpass
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import (
    AlreadyDecided,
    InvalidTransition,
    StaleDecision,
    TemplateChanged,
    UsageError,
)
from stageline.ledger import RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

SEEN: list[dict[str, Any]] = []


class S(TypedDict, total=False):
    text: str
    feedback: str
    answers: dict[str, Any]
    qa_history: list[dict[str, Any]]
    published: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    SEEN.append(dict(state))
    return {"text": f"draft {len(SEEN)}"}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


def gated(name: str = "targets", **gate: Any) -> Template:
    template = Template(name, state=S)
    template.add_stage("write", write)
    template.add_gate("approval", **{"changes_to": "write", **gate})
    template.add_stage("publish", publish)
    template.add_sequence("write", "approval", "publish")
    return template


ASKING = Template("asking", state=S)
ASKING.add_question("ask", questions=["Who is it for?"], answers_key="answers")
ASKING.add_stage("publish", publish)
ASKING.add_edge("ask", "publish")


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    SEEN.clear()
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


async def at_gate(runner: Runner, template: Template | None = None) -> tuple[str, Any]:
    run_id = (await runner.start(template or gated(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    return run_id, wait


async def test_changes_carry_the_note_to_the_node_and_record_who_asked(runner: Runner) -> None:
    run_id, wait = await at_gate(runner)
    again = await runner.request_changes(
        run_id,
        note="shorter",
        gate="approval",
        actor="ann",
        attempt=1,
        state_hash=wait.state_hash,
        wait_id=wait.wait_id,
    )
    assert again.status is RunStatus.WAITING
    assert SEEN[-1]["feedback"] == "shorter"
    first = (await runner.ledger.waits(run_id))[0]
    assert (first.decision, first.actor, first.note, first.status) == (
        "changes",
        "ann",
        "shorter",
        WaitStatus.APPLIED,
    )
    [decided] = [e for e in await runner.ledger.events(run_id) if e.kind == "gate.decided"]
    assert decided.message == "gate 'approval': changes by ann: shorter"
    assert decided.data == {
        "wait_id": wait.wait_id,
        "round": wait.round,
        "decision": "changes",
        "actor": "ann",
        "attempt": 1,
    }


@pytest.mark.parametrize("decide", ["approve", "reject", "request_changes"])
async def test_every_decision_is_refused_on_another_state_or_attempt(
    runner: Runner, decide: str
) -> None:
    run_id, wait = await at_gate(runner)
    act = getattr(runner, decide)
    note = {"note": "n"} if decide == "request_changes" else {}
    with pytest.raises(StaleDecision, match="made on state 0000, but the state at the gate"):
        await act(run_id, state_hash="0000", **note)
    with pytest.raises(StaleDecision, match="made for attempt 2, but the run now waits"):
        await act(run_id, attempt=2, **note)
    with pytest.raises(InvalidTransition, match="not waiting at a gate 'other'"):
        await act(run_id, gate="other", **note)
    runner.load(gated(max_changes=5))  # the template changed since the run began
    with pytest.raises(TemplateChanged):
        await act(run_id, **note)
    assert await runner.pending(run_id) == [wait]  # nothing recorded
    after = await act(run_id, force=True, actor="ann", **note)
    assert after.run.template_version == gated(max_changes=5).full_version
    [decided, *_] = await runner.ledger.waits(run_id)
    assert decided.actor == "ann" and decided.status is WaitStatus.APPLIED


@pytest.mark.parametrize("decide", ["reject", "request_changes"])
async def test_every_decision_binds_to_the_visit_shown(runner: Runner, decide: str) -> None:
    run_id, first = await at_gate(runner)
    await runner.request_changes(run_id, note="again", actor="ann")
    act = getattr(runner, decide)
    note = {"note": "n"} if decide == "request_changes" else {}
    with pytest.raises(AlreadyDecided, match="by ann"):
        await act(run_id, wait_id=first.wait_id, **note)
    with pytest.raises(AlreadyDecided, match="by ann"):
        await act(run_id, seen_at=first.requested_at, **note)


async def test_a_gate_is_named_by_its_name_or_its_whole_id(runner: Runner) -> None:
    run_id, wait = await at_gate(runner)
    with pytest.raises(InvalidTransition):
        await runner.approve(run_id, gate=wait.wait_id[:8])  # no prefixes for gates
    assert (await runner.approve(run_id, gate=wait.wait_id)).status is RunStatus.SUCCEEDED


async def test_a_question_set_is_named_by_its_id_or_a_prefix_of_six_or_more(
    runner: Runner,
) -> None:
    run_id = (await runner.start(ASKING, {})).run.run_id
    [wait] = await runner.pending(run_id)
    for short in (wait.wait_id[:5], "as"):
        with pytest.raises(InvalidTransition, match="not waiting at a question set"):
            await runner.answer(run_id, {"q1": "editors"}, question_id=short)
    done = await runner.answer(run_id, {"q1": "editors"}, question_id=wait.wait_id[:6])
    assert done.status is RunStatus.SUCCEEDED
    assert done.state["answers"] == {"q1": "editors"}


async def test_a_question_set_is_named_by_its_node(runner: Runner) -> None:
    run_id = (await runner.start(ASKING, {})).run.run_id
    done = await runner.answer(run_id, {"q1": "editors"}, question_id="ask", actor="bob")
    assert done.status is RunStatus.SUCCEEDED
    [answered] = await runner.ledger.waits(run_id)
    assert answered.actor == "bob"


async def test_a_stale_decision_says_what_it_was_for_and_what_is_there_now(
    runner: Runner,
) -> None:
    run_id, wait = await at_gate(runner)
    with pytest.raises(StaleDecision) as raised:
        await runner.reject(run_id, state_hash="0000")
    assert str(raised.value) == (
        f"stale: this reject for gate 'approval' of run {run_id} was made on state 0000, but "
        f"the state at the gate is now {wait.state_hash}; look again and decide on what it is now"
    )


async def test_a_gate_without_a_changes_route_takes_no_changes(runner: Runner) -> None:
    plain = Template("no_changes", state=S)
    plain.add_stage("write", write).add_gate("approval").add_stage("publish", publish)
    plain.add_sequence("write", "approval", "publish")
    run_id, _ = await at_gate(runner, plain)
    with pytest.raises(InvalidTransition) as raised:
        await runner.request_changes(run_id, note="more")
    assert str(raised.value) == "gate 'approval' takes no changes; approve or reject"


async def turns(state: S, history: list[dict[str, Any]], ctx: StageContext) -> Any:
    return [f"Question {len(history) + 1}?"]


TURNS = Template("turns", state=S)
TURNS.add_question("clarify", ask=turns, max_turns=2, answers_key="answers")
TURNS.add_stage("publish", publish)
TURNS.add_edge("clarify", "publish")


async def test_an_answer_binds_to_the_set_that_was_shown(runner: Runner) -> None:
    run_id = (await runner.start(TURNS, {})).run.run_id
    [first] = await runner.pending(run_id)
    second = await runner.answer(run_id, {"q1": "a"}, actor="ann")
    [next_set] = second.waiting
    assert next_set.wait_id != first.wait_id
    with pytest.raises(AlreadyDecided, match="already answered by ann"):
        await runner.answer(run_id, {"q1": "b"}, seen_at=first.requested_at, actor="bob")
    assert await runner.pending(run_id) == [next_set]


async def test_an_answer_reaches_the_run_with_its_services_and_template_check(
    runner: Runner,
) -> None:
    seen: list[Any] = []

    async def use(state: S, ctx: StageContext) -> dict[str, Any]:
        seen.append(ctx.services["mailer"])
        return {"published": True}

    template = Template("answered", state=S)
    template.add_question("ask", questions=["Who?"], answers_key="answers")
    template.add_stage("use", use)
    template.add_edge("ask", "use")
    run_id = (await runner.start(template, {}, services={"mailer": "first"})).run.run_id
    changed = Template("answered", state=S)
    changed.add_question("ask", questions=["Who?"], answers_key="answers")
    changed.add_stage("use", use).add_stage("publish", publish)  # one stage more
    changed.add_sequence("ask", "use", "publish")
    runner.load(changed)
    with pytest.raises(TemplateChanged):
        await runner.answer(run_id, {"q1": "x"})
    done = await runner.answer(run_id, {"q1": "x"}, services={"mailer": "second"}, force=True)
    assert done.status is RunStatus.SUCCEEDED and seen == ["second"]


async def test_a_decision_without_an_actor_is_by_the_user_or_unknown(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_user() -> str:
        raise OSError("no user name in this container")

    monkeypatch.setattr(getpass, "getuser", no_user)
    run_id, _ = await at_gate(runner)
    await runner.approve(run_id)
    [decided] = await runner.ledger.waits(run_id)
    assert decided.actor == "unknown"
    monkeypatch.setattr(getpass, "getuser", lambda: "carol")
    run_id, _ = await at_gate(runner)
    await runner.approve(run_id)
    [decided] = await runner.ledger.waits(run_id)
    assert decided.actor == "carol"


async def test_what_waits_is_listed_with_each_runs_template(runner: Runner) -> None:
    _, gate = await at_gate(runner)
    question_run = (await runner.start(ASKING, {})).run.run_id
    [question] = await runner.pending(question_run)
    assert await runner.pending_with_templates() == [(gate, "targets"), (question, "asking")]
    assert await runner.pending_with_templates(question_run) == [(question, "asking")]


async def test_a_request_for_changes_needs_a_note(runner: Runner) -> None:
    run_id, _ = await at_gate(runner)
    for empty in ("", "  "):
        with pytest.raises(UsageError) as raised:
            await runner.request_changes(run_id, note=empty)
        assert str(raised.value) == "a request for changes needs a note saying what to change"


async def test_the_services_given_with_a_decision_reach_the_nodes_after_it(
    runner: Runner,
) -> None:
    used: list[Any] = []

    async def archive(state: S, ctx: StageContext) -> dict[str, Any]:
        used.append(("archive", ctx.services["tag"]))
        return {}

    async def draft(state: S, ctx: StageContext) -> dict[str, Any]:
        used.append(("write", ctx.services.get("tag")))
        return {"text": "draft"}

    template = Template("serviced", state=S)
    template.add_stage("write", draft).add_stage("archive", archive)
    template.add_gate("approval", changes_to="write", reject_to="archive")
    template.add_stage("publish", publish)
    template.add_sequence("write", "approval", "publish")
    run_id, _ = await at_gate(runner, template)
    await runner.request_changes(run_id, note="again", services={"tag": "changes"})
    await runner.reject(run_id, services={"tag": "reject"})
    assert used == [("write", None), ("write", "changes"), ("archive", "reject")]
