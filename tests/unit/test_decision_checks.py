"""What a decision at a gate, and the sweeper's answer to a question set, check before anything
is recorded, on a real SQLite file: the attempt the gate was asked in, that only a park gate is
taken over, and that a deadline's defaults are not applied on a template that changed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import InvalidTransition, StaleDecision
from stageline.ledger import RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    text: str
    size: dict[str, Any]
    published: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"published": True}


async def size(state: S, ctx: StageContext) -> dict[str, Any]:
    question = {"id": "q", "text": "Which size?", "default": "small"}
    asked = ctx.ask([question], turn=0, deadline=10, on_deadline="default")
    return {"size": asked["answers"]}


def gated() -> Template:
    template = Template("checked", state=S)
    template.add_stage("write", write).add_gate("approval").add_stage("publish", publish)
    return template.add_sequence("write", "approval", "publish")


def asking(*, more: bool = False) -> Template:
    template = Template("sized", state=S).add_stage("size", size)
    if more:  # a new version of the template
        template.add_stage("publish", publish).add_edge("size", "publish")
    return template


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


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
