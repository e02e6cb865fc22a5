"""How an advance ends when the waits it settles moved on meanwhile, and resume's ``expect``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import InvalidTransition
from stageline.ledger import RunStatus, Wait, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.testing import memory_runner


class S(TypedDict, total=False):
    n: int
    published: bool


@pytest.fixture
async def runner(memory_settings: Settings) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings) as opened:
        yield opened


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


def gated(publish: Any) -> Template:
    template = Template("ending", state=S)
    template.add_stage("write", write)
    template.add_gate("approval")
    template.add_stage("publish", publish)
    return template.add_sequence("write", "approval", "publish")


async def test_a_round_moved_on_while_the_advance_ended_stays_as_moved(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
        return {"published": True}

    first = await runner.start(gated(publish), {})
    read = runner.ledger.waits

    async def read_then_moved_on(run_id: str) -> list[Wait]:
        """Someone else moves a decided round on just after the advance read it."""
        found = await read(run_id)
        for wait in found:
            if wait.status is WaitStatus.DECIDED:
                await runner.ledger.settle_wait(
                    run_id, wait.wait_id, wait.round, WaitStatus.CLOSED, reason="elsewhere"
                )
        return found

    monkeypatch.setattr(runner.ledger, "waits", read_then_moved_on)
    done = await runner.approve(first.run.run_id, actor="ann")
    assert done.status is RunStatus.SUCCEEDED and done.state["published"] is True
    [closed] = await read(first.run.run_id)
    assert (closed.status, closed.reason) == (WaitStatus.CLOSED, "elsewhere")
    kinds = [e.kind for e in await runner.ledger.events(first.run.run_id)]
    assert kinds.count("run.succeeded") == 1 and kinds[-1] == "run.succeeded"
    assert done.records == await runner.ledger.node_records(first.run.run_id)


async def test_resume_leaves_a_run_outside_the_statuses_it_expects(runner: Runner) -> None:
    async def publish(state: S, ctx: StageContext) -> dict[str, Any]:
        return {"published": True}

    first = await runner.start(gated(publish), {})
    with pytest.raises(InvalidTransition, match="waiting, not queued or running"):
        await runner.resume(first.run.run_id, expect=(RunStatus.QUEUED, RunStatus.RUNNING))
    assert (await runner.ledger.get_run(first.run.run_id)).status is RunStatus.WAITING
