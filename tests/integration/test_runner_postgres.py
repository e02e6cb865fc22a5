"""The runner on Postgres: what must hold across processes (runners), as on SQLite.

A subset of ``test_runner_sqlite.py``, parametrized over both real databases so that the two
stay comparable; the tables are read through a second connection, never through the runner.
"""

from __future__ import annotations

import asyncio
import operator
from collections import Counter
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.types import interrupt
from pydantic import BaseModel

from stageline.config import Settings, with_overrides
from stageline.errors import LeaseHeld
from stageline.ledger import NodeStatus, RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

CALLS: Counter[str] = Counter()
FAIL: set[str] = set()
TEMPLATES: dict[str, Template] = {}


class S(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    FAIL.clear()
    TEMPLATES.clear()


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest) -> Settings:
    base: Settings = request.getfixturevalue(f"{request.param}_settings")
    return with_overrides(base, lease_ttl=0.6)


def step(name: str, *, sleep: float = 0.0) -> Any:
    async def body(state: S, ctx: StageContext) -> dict[str, Any]:
        CALLS[name] += 1
        if sleep:
            await asyncio.sleep(sleep)
        if name in FAIL:
            raise RuntimeError(f"{name} is broken")
        ctx.metric("calls", 1)
        return {"n": state.get("n", 0) + 1, "trail": [name]}

    body.__name__ = body.__qualname__ = name
    return body


def chain(name: str, *nodes: str, sleep: dict[str, float] | None = None) -> Template:
    template = Template(name, state=S)
    for n in nodes:
        template.add_stage(n, step(n, sleep=(sleep or {}).get(n, 0.0)))
    return template.add_sequence(*nodes)


def publish(settings: Settings, template: Template) -> None:
    """Make ``template`` findable by name in the templates folder, as a new process would."""
    TEMPLATES[template.name] = template
    folder = settings.root / "templates"
    folder.mkdir(exist_ok=True)
    (folder / f"{template.name}.py").write_text(
        "import sys\n\n\n"
        "def make_template():\n"
        f"    return sys.modules[{__name__!r}].TEMPLATES[{template.name!r}]\n"
    )


async def committed(settings: Settings, run_id: str) -> tuple[list[str], int]:
    """Event kinds and node-record count of a run, as a separate process reads them."""
    async with Runner.open(settings) as reader:
        kinds = [e.kind for e in await reader.ledger.events(run_id)]
        records = await reader.ledger.node_records(run_id)
    return kinds, len(records)


async def test_a_run_succeeds_and_another_process_sees_it(settings: Settings) -> None:
    publish(settings, chain("pipeline", "a", "b", "c"))
    async with Runner.open(settings) as runner:
        summary = await runner.start("pipeline", {"n": 1})
    assert summary.status is RunStatus.SUCCEEDED
    assert [(r.node, r.status) for r in summary.records] == [
        ("a", NodeStatus.SUCCEEDED), ("b", NodeStatus.SUCCEEDED), ("c", NodeStatus.SUCCEEDED)]
    assert summary.state == {"n": 4, "trail": ["a", "b", "c"]}

    run_id = summary.run.run_id
    kinds, n_records = await committed(settings, run_id)
    assert n_records == 3
    assert len(kinds) == summary.run.last_seq
    assert kinds[0] == "run.started" and kinds[-1] == "run.succeeded"
    async with Runner.open(settings) as again:
        seen = await again.status(run_id)
    assert seen.run == summary.run
    assert seen.records == summary.records
    assert seen.state == summary.state


async def test_retry_in_a_new_process_continues_from_the_checkpoint(settings: Settings) -> None:
    publish(settings, chain("pipeline", "a", "b", "c"))
    FAIL.add("b")
    async with Runner.open(settings) as runner:
        failed = await runner.start("pipeline", {})
    assert failed.status is RunStatus.FAILED
    assert (failed.run.failed_node, failed.state) == ("b", {"n": 1, "trail": ["a"]})

    FAIL.clear()
    async with Runner.open(settings) as fresh:
        summary = await fresh.retry(failed.run.run_id)
    assert summary.status is RunStatus.SUCCEEDED
    assert CALLS == {"a": 1, "b": 2, "c": 1}
    assert summary.state == {"n": 3, "trail": ["a", "b", "c"]}
    b_records = sorted((r.attempt, r.status) for r in summary.records if r.node == "b")
    assert b_records == [(1, NodeStatus.FAILED), (2, NodeStatus.SUCCEEDED)]


async def test_a_queued_run_is_started_by_resume_in_another_process(settings: Settings) -> None:
    publish(settings, chain("pipeline", "a", "b"))
    async with Runner.open(settings) as runner:
        run = await runner.create("pipeline", {"n": 5})
    async with Runner.open(settings) as worker:
        summary = await worker.resume(run.run_id)
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state == {"n": 7, "trail": ["a", "b"]}


async def test_a_second_process_cannot_advance_a_run_that_is_running(settings: Settings) -> None:
    publish(settings, chain("slow", "slow", "after", sleep={"slow": 0.5}))
    async with Runner.open(settings) as one, Runner.open(settings) as two:
        run = await one.create("slow", {})
        task = asyncio.create_task(one.resume(run.run_id))
        await asyncio.sleep(0.15)
        with pytest.raises(LeaseHeld):
            await two.resume(run.run_id)
        summary = await task
    assert summary.status is RunStatus.SUCCEEDED
    assert CALLS == {"slow": 1, "after": 1}


async def test_cancel_from_another_process_stops_the_run_between_steps(
    settings: Settings,
) -> None:
    publish(settings, chain("slow", "slow", "after", sleep={"slow": 0.5}))
    async with Runner.open(settings) as one, Runner.open(settings) as two:
        task = asyncio.create_task(one.start("slow", {}, run_id="cancel-me"))
        await asyncio.sleep(0.15)
        assert (await two.cancel("cancel-me")).cancel_requested is True
        summary = await asyncio.wait_for(task, 5)
    assert summary.status is RunStatus.CANCELLED
    assert CALLS == {"slow": 1}
    kinds, _ = await committed(settings, "cancel-me")
    assert kinds[-1] == "run.cancelled"


async def ask(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["ask"] += 1
    return {"trail": [str(interrupt({"question": "go on?"}))]}


async def test_a_waiting_run_is_seen_waiting_and_cancelled_from_another_process(
    settings: Settings,
) -> None:
    asks = Template("asks", state=S).add_stage("ask", ask).add_stage("after", step("after"))
    publish(settings, asks.add_edge("ask", "after"))
    async with Runner.open(settings) as runner:
        waiting = await runner.start("asks", {})
    assert waiting.status is RunStatus.WAITING
    async with Runner.open(settings) as other:
        assert (await other.status(waiting.run.run_id)).status is RunStatus.WAITING
        cancelled = await other.cancel(waiting.run.run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert CALLS == {"ask": 1}


class Finding(BaseModel):
    claim: str


class WithFinding(TypedDict, total=False):
    finding: Any
    kind: str


async def inspect_finding(state: WithFinding, ctx: StageContext) -> dict[str, Any]:
    CALLS["inspect"] += 1
    if "inspect" in FAIL:
        raise RuntimeError("not yet")
    return {"kind": type(state["finding"]).__name__}


async def test_registered_types_are_read_back_through_the_strict_serializer(
    settings: Settings,
) -> None:
    template = Template("findings", state=WithFinding, checkpoint_types=[Finding])
    publish(settings, template.add_stage("inspect", inspect_finding))
    FAIL.add("inspect")
    async with Runner.open(settings) as runner:
        failed = await runner.start("findings", {"finding": Finding(claim="x")})
    FAIL.clear()
    async with Runner.open(settings) as runner:
        summary = await runner.retry(failed.run.run_id)
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state == {"finding": Finding(claim="x"), "kind": "Finding"}
