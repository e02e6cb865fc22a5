"""What ``Runner.respond`` checks before it records an answer to a graph's own ``interrupt()``,
on a real SQLite file: the visit it names (a whole id or a shown prefix, never another kind's
wait), the attempt it was asked in, a value that is not null, a template that changed, and
which of two interrupts waiting at once it answers."""

from __future__ import annotations

import operator
import re
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.types import interrupt

from stageline.errors import (
    AnswerInvalid,
    InvalidTransition,
    StaleDecision,
    TemplateChanged,
    UsageError,
)
from stageline.ledger import RunStatus, WaitKind, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    got: Annotated[list[Any], operator.add]


async def ask(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"got": [interrupt("which colour?"), ctx.services.get("mailer")]}


async def other(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"got": [interrupt("which size?")]}


async def begin(state: S, ctx: StageContext) -> dict[str, Any]:
    return {}


async def finish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"got": ["end"]}


def asking(*, extra: bool = False) -> Template:
    made = Template("asking", state=S).add_stage("ask", ask)
    if extra:  # the template changed since the run began
        made.add_stage("finish", finish).add_edge("ask", "finish")
    return made


async def test_a_null_answer_is_refused_and_nothing_is_recorded(runner: Runner) -> None:
    run_id = (await runner.start(asking(), {})).run.run_id
    with pytest.raises(AnswerInvalid, match=r"^an interrupt is answered with a value, not null$"):
        await runner.respond(run_id, None)
    [wait] = await runner.pending(run_id)
    assert wait.status is WaitStatus.PENDING and wait.response is None


async def test_an_answer_for_an_earlier_attempt_is_stale(runner: Runner) -> None:
    run_id = (await runner.start(asking(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    await runner.ledger.transition(run_id, RunStatus.WAITING, attempt=2)  # the run moved on
    with pytest.raises(StaleDecision) as info:
        await runner.respond(run_id, "red")
    assert str(info.value) == (
        f"stale: interrupt {wait.wait_id[:8]} at 'ask' was asked in attempt 1, "
        "the run is at attempt 2"
    )
    assert await runner.pending(run_id) == [wait]  # nothing recorded


async def test_an_answer_waits_for_force_on_a_changed_template_and_takes_its_services(
    runner: Runner,
) -> None:
    run_id = (await runner.start(asking(), {}, services={"mailer": "first"})).run.run_id
    runner.load(asking(extra=True))
    with pytest.raises(TemplateChanged):
        await runner.respond(run_id, "red")
    with pytest.raises(TemplateChanged):  # the collaborator's own default is no force either
        await runner.decisions.respond(run_id, "red")
    done = await runner.respond(run_id, "red", services={"mailer": "second"}, force=True)
    assert done.status is RunStatus.SUCCEEDED
    assert done.state["got"] == ["red", "second", "end"]


async def test_a_visit_is_named_by_its_id_or_a_shown_prefix_of_it(runner: Runner) -> None:
    run_id = (await runner.start(asking(), {})).run.run_id
    [wait] = await runner.pending(run_id)
    with pytest.raises(InvalidTransition, match=f"run {run_id} has no interrupt wait 'nope'"):
        await runner.respond(run_id, "red", wait_id="nope")
    short = wait.wait_id[:5]  # too short to name a visit
    with pytest.raises(InvalidTransition, match=f"run {run_id} has no interrupt wait '{short}'"):
        await runner.respond(run_id, "red", wait_id=short)
    done = await runner.respond(run_id, "red", wait_id=wait.wait_id[:6], actor="ann")
    assert done.status is RunStatus.SUCCEEDED and done.state["got"] == ["red", None]
    [applied] = await runner.ledger.waits(run_id)
    assert (applied.wait_id, applied.status, applied.actor) == (
        wait.wait_id,
        WaitStatus.APPLIED,
        "ann",
    )


async def test_a_gate_is_named_by_its_whole_id_only(runner: Runner) -> None:
    gated = Template("gated", state=S).add_stage("begin", begin).add_gate("approval")
    gated.add_stage("finish", finish).add_sequence("begin", "approval", "finish")
    run_id = (await runner.start(gated, {})).run.run_id
    [wait] = await runner.pending(run_id)
    prefix = wait.wait_id[:8]
    with pytest.raises(InvalidTransition, match=f"run {run_id} has no gate wait '{prefix}'"):
        await runner.approve(run_id, wait_id=prefix)
    assert await runner.pending(run_id) == [wait]


async def test_an_interrupt_answer_never_binds_to_a_gate_of_the_run(runner: Runner) -> None:
    gated = Template("gate_then_ask", state=S).add_gate("approval").add_stage("ask", ask)
    gated.add_edge("approval", "ask")
    run_id = (await runner.start(gated, {})).run.run_id
    [gate] = await runner.pending(run_id)
    asked = await runner.approve(run_id)
    [waiting] = asked.waiting
    assert waiting.kind is WaitKind.INTERRUPT
    with pytest.raises(InvalidTransition, match=f"has no interrupt wait '{gate.wait_id}'"):
        await runner.respond(run_id, "red", wait_id=gate.wait_id)
    assert await runner.pending(run_id) == [waiting]


async def test_of_two_interrupts_waiting_the_one_given_is_answered(runner: Runner) -> None:
    both = Template("two_interrupts", state=S).add_stage("begin", begin)
    both.add_stage("ask", ask).add_stage("other", other).add_stage("finish", finish)
    both.add_fanout("begin", ["ask", "other"], join="finish")
    run_id = (await runner.start(both, {})).run.run_id
    waiting = {w.node: w for w in await runner.pending(run_id)}
    assert sorted(waiting) == ["ask", "other"]
    with pytest.raises(UsageError) as info:
        await runner.respond(run_id, "red")
    said = re.fullmatch(
        rf"run {run_id} waits at 2 interrupts \((\S+), (\S+)\); say which with --wait",
        str(info.value),
    )
    assert said is not None
    assert sorted(said.groups()) == sorted(w.wait_id for w in waiting.values())
    await runner.respond(run_id, "large", wait=waiting["other"], actor="ann")
    [left] = await runner.pending(run_id)
    assert left.wait_id == waiting["ask"].wait_id
    answered = {w.node: w for w in await runner.ledger.waits(run_id)}["other"]
    assert answered.status is WaitStatus.APPLIED and answered.response is not None
    assert answered.response["value"] == "large"


async def test_a_gate_named_among_two_waiting_binds_to_what_waited_when_looked(
    runner: Runner,
) -> None:
    both = Template("two_gates", state=S).add_stage("begin", begin)
    both.add_gate("legal").add_gate("style").add_stage("finish", finish)
    both.add_fanout("begin", ["legal", "style"], join="finish")
    run_id = (await runner.start(both, {})).run.run_id
    waiting = {w.name: w for w in await runner.pending(run_id)}
    assert sorted(waiting) == ["legal", "style"]
    looked = max(w.requested_at for w in waiting.values())
    await runner.approve(run_id, gate="style", seen_at=looked, actor="ann")
    [left] = await runner.pending(run_id)
    assert left.wait_id == waiting["legal"].wait_id
    decided = {w.name: w for w in await runner.ledger.waits(run_id)}["style"]
    assert (decided.status, decided.actor) == (WaitStatus.APPLIED, "ann")
