"""Sync stages run on a worker thread: a blocking call holds up neither the event loop (a
server's other requests, a parallel sibling) nor the stage's own log lines."""

from __future__ import annotations

import asyncio
import operator
import threading
import time
from typing import Annotated, Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.ledger import NodeStatus, RunStatus
from stageline.ledger._sql_staging import FLUSH_DELAY
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

pytestmark = pytest.mark.timeout(60)


class S(TypedDict, total=False):
    trail: Annotated[list[str], operator.add]


def fan(name: str, lines: int = 0) -> Template:
    """``begin``, then sync stages ``left`` and ``right`` at once, each logging ``lines`` lines
    once both are in (inline on the loop, the first would wait alone)."""
    both_in = threading.Barrier(2, timeout=20)

    def branch(name: str) -> Any:
        def body(state: S, ctx: StageContext) -> dict[str, Any]:
            both_in.wait()
            for i in range(lines):
                ctx.log.info(f"{name} {i}")
            return {"trail": [name]}

        return body

    def begin(state: S, ctx: StageContext) -> dict[str, Any]:
        return {"trail": ["begin"]}

    template = Template(name, state=S).add_stage("begin", begin)
    template.add_stage("left", branch("left")).add_stage("right", branch("right"))
    return template.set_start("begin").add_fanout("begin", ["left", "right"])


async def test_parallel_sync_stages_run_at_the_same_time(sqlite_settings: Settings) -> None:
    template = fan("fan")
    async with Runner.open(sqlite_settings) as runner:
        summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    assert sorted(summary.state["trail"]) == ["begin", "left", "right"]


async def test_the_loop_answers_while_a_sync_stage_blocks(sqlite_settings: Settings) -> None:
    released = threading.Event()

    def blocking(state: S, ctx: StageContext) -> dict[str, Any]:
        time.sleep(FLUSH_DELAY * 5)  # past the flush the node's start scheduled
        ctx.log.info("waiting for the loop")
        if not released.wait(timeout=20):
            raise TimeoutError("the event loop never ran while this stage blocked")
        return {"trail": ["blocking"]}

    template = Template("block", state=S).add_stage("blocking", blocking)
    template.add_sequence("blocking")
    async with Runner.open(sqlite_settings) as runner:
        run = asyncio.ensure_future(runner.start(template, {}))
        # The stage's log line reaches the ledger while the stage still runs (flushed from its
        # thread on the loop), and only then is the stage let go.
        while True:
            runs = await runner.ledger.list_runs(template="block")
            if runs:
                events = await runner.ledger.events(runs[0].run_id)
                if any(e.message == "waiting for the loop" for e in events):
                    break
            await asyncio.sleep(0.02)
        assert not run.done()
        released.set()
        summary = await run
    assert summary.status is RunStatus.SUCCEEDED
    assert [(r.node, r.status) for r in summary.records] == [("blocking", NodeStatus.SUCCEEDED)]


@pytest.mark.parametrize("where", ["memory", "sqlite"])
async def test_log_lines_of_parallel_sync_stages_are_numbered_once_each(
    where: str, request: pytest.FixtureRequest
) -> None:
    """Stage threads only stage their lines; the ledger numbers them on its loop, in memory as
    on a file (the old in-memory ledger numbered them on the threads, racing each other)."""
    settings: Settings = request.getfixturevalue(f"{where}_settings")
    lines = 200
    template = fan("fan_logs", lines)
    async with Runner.open(settings) as runner:
        summary = await runner.start(template, {})
        events = await runner.ledger.events(summary.run.run_id)
    assert summary.status is RunStatus.SUCCEEDED
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    logged = sorted(e.message for e in events if e.kind == "stage.log")
    assert logged == sorted(f"{n} {i}" for n in ("left", "right") for i in range(lines))
