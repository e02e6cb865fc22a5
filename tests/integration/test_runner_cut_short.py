"""An advance cut short mid-step (its task cancelled: Ctrl-C, SIGTERM, a Python caller) leaves
its run ``stopped``, its lease released, until a person resumes it; while the runner drains (a
shutdown that could not wait for the step) the run goes back to ``queued`` instead, for the next
process. On a real SQLite file and a real Postgres database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

from stageline.config import load_settings
from stageline.errors import InvalidTransition
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.templates import Template


class Count(TypedDict, total=False):
    steps: int


@pytest.fixture
async def runner(shared_backend_url: str, tmp_path: Path) -> AsyncIterator[Runner]:
    home = tmp_path / ".stageline"
    env = {"STAGELINE_HOME": str(home), "STAGELINE_DATABASE_URL": shared_backend_url}
    async with Runner.open(load_settings(cwd=tmp_path, env=env), deliver=False) as opened:
        yield opened


def _held(entered: asyncio.Event, release: asyncio.Event) -> Template:
    async def hold(state: Count, ctx: Any) -> dict[str, Any]:
        entered.set()
        await release.wait()
        return {"steps": 1}

    return Template("held", state=Count).add_stage("hold", hold)


async def _cut(runner: Runner, template: Template, run_id: str, entered: asyncio.Event) -> None:
    advance = asyncio.create_task(runner.start(template, {}, run_id=run_id))
    await entered.wait()
    advance.cancel()
    with pytest.raises(asyncio.CancelledError):
        await advance


async def test_a_cancelled_advance_leaves_the_run_stopped_until_resumed(runner: Runner) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    template = _held(entered, release)
    await _cut(runner, template, "cut-1", entered)
    run = await runner.ledger.get_run("cut-1")
    assert (run.status, run.lease_holder, run.lease_expires_at) == (RunStatus.STOPPED, None, None)
    assert [e.kind for e in await runner.ledger.events("cut-1")][-1] == "run.stopped"
    assert [r.run_id for r in await runner.ledger.list_runs(status="stopped")] == ["cut-1"]
    with pytest.raises(InvalidTransition, match="stageline resume cut-1"):
        await runner.retry("cut-1")
    release.set()
    done = await runner.resume("cut-1")
    assert done.status is RunStatus.SUCCEEDED and done.state["steps"] == 1


async def test_a_stopped_run_can_be_cancelled(runner: Runner) -> None:
    entered = asyncio.Event()
    await _cut(runner, _held(entered, asyncio.Event()), "cut-2", entered)
    cancelled = await runner.cancel("cut-2")
    assert cancelled.status is RunStatus.CANCELLED


async def test_cut_short_while_draining_goes_back_to_the_queue(runner: Runner) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    template = _held(entered, release)
    advance = asyncio.create_task(runner.start(template, {}, run_id="cut-3"))
    await entered.wait()
    assert runner.drain("server shutdown") == 1  # the step does not end: the shutdown cuts it
    advance.cancel()
    with pytest.raises(asyncio.CancelledError):
        await advance
    run = await runner.ledger.get_run("cut-3")
    assert (run.status, run.lease_holder) == (RunStatus.QUEUED, None)
    last = (await runner.ledger.events("cut-3"))[-1]
    assert (last.kind, last.message) == ("run.drained", "server shutdown")
