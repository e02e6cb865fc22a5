"""A graph's own ``interrupt(value)`` is a wait a person answers, on a SQLite file and Postgres.

Any value (text, a dict, a list, an Agent-Inbox ``HumanInterrupt``), in a stage or inside a
subgraph: recorded as a wait, answered with an audited value (its actor, bound to the visit),
first answer wins, and the node's ``interrupt()`` returns the value; a resume value written
into the checkpoint behind the ledger's back is refused.
"""

from __future__ import annotations

import asyncio
import operator
import typing
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import interrupt

from stageline.config import InterruptsConfig, Settings, with_overrides
from stageline.errors import AlreadyDecided, AnswerInvalid, CheckpointCorrupt, StaleDecision
from stageline.ledger import NodeStatus, RunStatus, WaitKind, WaitStatus
from stageline.runner import Runner
from stageline.templates import Template

INBOX = {
    "action_request": {"action": "send_email", "args": {"to": "ann@example.com"}},
    "config": {
        "allow_ignore": True,
        "allow_respond": True,
        "allow_edit": False,
        "allow_accept": True,
    },
    "description": "Send this email?",
}


class S(TypedDict, total=False):
    got: Annotated[list[Any], operator.add]


def asking(*values: Any) -> Callable[..., Any]:
    """A stage that asks each of ``values`` in turn with LangGraph's own ``interrupt``."""

    async def ask(state: S, ctx: Any) -> dict[str, Any]:
        return {"got": [interrupt(v) for v in values]}

    return ask


def inner(state: S) -> dict[str, Any]:
    return {"got": [interrupt({"inner": "which colour?"})]}


SUB = StateGraph(S).add_node("inner", inner).add_edge(START, "inner").compile()


async def through_subgraph(state: S, ctx: Any) -> dict[str, Any]:
    done = await SUB.ainvoke({"got": []})
    return {"got": [*done["got"], "after the subgraph"]}


def template(name: str, stage: Callable[..., Any]) -> Template:
    made = Template(name, state=S).add_stage("ask", stage)
    return made.add_stage("after", _after).add_edge("ask", "after")


async def _after(state: S, ctx: Any) -> dict[str, Any]:
    return {"got": ["after"]}


@pytest.fixture
def settings(settings_for: Callable[[str], Settings], shared_backend_url: str) -> Settings:
    return settings_for(shared_backend_url)


@pytest.fixture
async def runner(settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(settings) as opened:
        yield opened


async def test_any_value_waits_and_each_answer_is_recorded_then_returned(runner: Runner) -> None:
    mine = {"kind": "gate", "gate": "not stageline's"}  # a graph's own value that looks like one
    values: list[Any] = ["go on?", {"q": 1}, [1, "two"], mine, INBOX, [INBOX]]
    started = await runner.start(template("many", asking(*values)), {})
    run_id = started.run.run_id
    answers: list[Any] = ["yes", {"a": 2}, ["x"], 4, {"type": "accept"}, [{"type": "ignore"}]]
    summary = started
    for asked, answer in zip(values, answers, strict=True):
        assert summary.status is RunStatus.WAITING
        [wait] = await runner.pending(run_id)
        assert (wait.kind, wait.node, wait.name) == (WaitKind.INTERRUPT, "ask", "ask")
        assert wait.payload["value"] == asked
        assert wait.payload["inbox"] == (INBOX if asked in (INBOX, [INBOX]) else None)
        assert wait.deadline_at == pytest.approx(wait.requested_at + 24 * 3600)
        assert wait.policy == ("remind", "escalate", "park")
        summary = await runner.respond(run_id, answer, actor="ann", wait_id=wait.wait_id)
    assert summary.status is RunStatus.SUCCEEDED
    inbox, ignored = [{"type": "accept", "args": None}], [{"type": "ignore", "args": None}]
    assert summary.state["got"] == ["yes", {"a": 2}, ["x"], 4, inbox, ignored, "after"]
    waits = (await runner.status(run_id)).waits
    assert [(w.status, w.actor, w.response and w.response["value"]) for w in waits] == [
        (WaitStatus.APPLIED, "ann", a) for a in ["yes", {"a": 2}, ["x"], 4, inbox, ignored]
    ]
    kinds = [e.kind for e in await runner.ledger.events(run_id)]
    assert kinds.count("interrupt.waiting") == 6 and kinds.count("interrupt.answered") == 6


async def test_a_human_interrupt_takes_only_what_its_config_allows(runner: Runner) -> None:
    started = await runner.start(template("inbox", asking(INBOX)), {})
    run_id = started.run.run_id
    with pytest.raises(AnswerInvalid, match="does not allow 'edit'"):
        await runner.respond(run_id, [{"type": "edit", "args": {"action": "x", "args": {}}}])
    with pytest.raises(AnswerInvalid, match="Agent-Inbox response"):
        await runner.respond(run_id, "just text")
    [wait] = await runner.pending(run_id)
    assert wait.status is WaitStatus.PENDING and wait.response is None
    done = await runner.respond(run_id, {"type": "response", "args": "not now"})
    assert done.state["got"][0] == [{"type": "response", "args": "not now"}]


async def test_a_subgraph_interrupt_resumes_inside_the_subgraph(runner: Runner) -> None:
    started = await runner.start(template("nested", through_subgraph), {})
    [wait] = started.waiting
    assert wait.kind is WaitKind.INTERRUPT and wait.payload["value"] == {"inner": "which colour?"}
    assert wait.node == "ask" and wait.payload["namespace"].startswith("ask:")
    done = await runner.respond(started.run.run_id, "blue", actor="bo")
    assert done.status is RunStatus.SUCCEEDED
    assert done.state["got"] == ["blue", "after the subgraph", "after"]
    [applied] = (await runner.status(started.run.run_id)).waits
    assert (applied.status, applied.actor) == (WaitStatus.APPLIED, "bo")
    assert [r.status for r in done.records if r.node == "ask"][-1] is NodeStatus.SUCCEEDED


async def test_the_first_answer_wins_and_a_second_is_already_decided(
    settings: Settings, runner: Runner
) -> None:
    made = template("race", asking("who first?"))
    started = await runner.start(made, {})
    run_id = started.run.run_id
    [wait] = started.waiting
    async with Runner.open(settings) as other:  # another process, as it were
        other.load(made)
        results = await asyncio.gather(
            runner.respond(run_id, "ann's", actor="ann", wait_id=wait.wait_id),
            other.respond(run_id, "bo's", actor="bo", wait_id=wait.wait_id),
            return_exceptions=True,
        )
    won = [r for r in results if not isinstance(r, BaseException)]
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(won) == 1 and len(lost) == 1
    assert isinstance(lost[0], AlreadyDecided | StaleDecision), lost[0]
    [applied] = (await runner.status(run_id)).waits
    assert won[0].state["got"] == [applied.response and applied.response["value"], "after"]
    with pytest.raises(AlreadyDecided, match="already answered by"):
        await runner.respond(run_id, "late", actor="cy", wait_id=wait.wait_id)


async def test_a_resume_value_the_ledger_did_not_record_is_refused(runner: Runner) -> None:
    started = await runner.start(template("tamper", asking("go on?")), {})
    run_id = started.run.run_id
    [wait] = started.waiting
    saver: Any = runner.graphs.saver(runner.graphs.load("tamper"))
    saved = await saver.aget_tuple({"configurable": {"thread_id": run_id}})
    [task] = {task for task, channel, _ in saved.pending_writes if channel == "__interrupt__"}
    # A resume value written behind the ledger's back, as a process with the database would.
    await saver.aput_writes(
        typing.cast(Any, saved.config), [("__resume__", ["forged"])], task_id=task
    )
    with pytest.raises(CheckpointCorrupt, match="no decision the ledger recorded"):
        await runner.respond(run_id, "mine", actor="ann")
    [still] = await runner.pending(run_id)
    assert (still.wait_id, still.status, still.response) == (wait.wait_id, WaitStatus.PENDING, None)


async def test_deadlines_come_from_the_project_and_the_run_then_park_or_fail(
    settings: Settings,
) -> None:
    failing = with_overrides(
        settings, interrupts=InterruptsConfig(deadline="1h", on_deadline="fail")
    )
    async with Runner.open(failing) as runner:
        made = template("deadlines", asking("still there?"))
        [wait] = (await runner.start(made, {})).waiting
        assert wait.deadline_at == pytest.approx(wait.requested_at + 3600)
        assert wait.policy == ("remind", "escalate", "fail")
        swept = await runner.sweep(now=wait.requested_at + 3601)
        assert [(s["step"], s["outcome"]) for s in swept] == [
            ("remind", None),
            ("escalate", None),
            ("fail", "failed"),
        ]
        failed = await runner.ledger.get_run(wait.run_id)
        assert (failed.status, failed.failure_phase) == (RunStatus.FAILED, "deadline")
        [expired] = (await runner.status(wait.run_id)).waits
        assert expired.status is WaitStatus.EXPIRED

        [own] = (await runner.start(made, {}, deadlines={"ask": "10s"})).waiting
        assert own.deadline_at == pytest.approx(own.requested_at + 10)
    async with Runner.open(settings) as runner:  # the default: a day, then it stays parked
        runner.load(made)
        [parked] = (await runner.start(made, {})).waiting
        swept = await runner.sweep(now=parked.requested_at + 24 * 3600 + 1)
        assert swept[-1]["step"] == "park" and swept[-1]["outcome"] == "parked"
        assert (await runner.ledger.get_run(parked.run_id)).status is RunStatus.PARKED
        done = await runner.respond(parked.run_id, "yes, still here")
        assert done.status is RunStatus.SUCCEEDED


async def test_a_resume_value_forged_inside_the_subgraph_is_refused(runner: Runner) -> None:
    started = await runner.start(template("nested_tamper", through_subgraph), {})
    run_id = started.run.run_id
    [wait] = started.waiting
    saver: Any = runner.graphs.saver(runner.graphs.load("nested_tamper"))
    inner_config = {
        "configurable": {"thread_id": run_id, "checkpoint_ns": wait.payload["namespace"]}
    }
    saved = await saver.aget_tuple(inner_config)
    [task] = {task for task, channel, _ in saved.pending_writes if channel == "__interrupt__"}
    await saver.aput_writes(saved.config, [("__resume__", ["forged"])], task_id=task)
    with pytest.raises(CheckpointCorrupt, match="no decision the ledger recorded"):
        await runner.respond(run_id, "mine", actor="ann")
    [still] = await runner.pending(run_id)
    assert (still.status, still.response) == (WaitStatus.PENDING, None)
