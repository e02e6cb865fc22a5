"""The runner on each real database (a SQLite file, Postgres): what must hold across processes
(runners) and reopens. Rows are read back through a connection of their own (``committed``),
never through the runner that wrote them."""

from __future__ import annotations

import asyncio
import operator
from collections import Counter
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.types import interrupt
from pydantic import BaseModel

from stageline.config import Settings, with_overrides
from stageline.errors import InputError, LeaseHeld, RunNotFound, TemplateChanged
from stageline.ledger import NodeStatus, RunStatus, open_ledger
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

CALLS: Counter[str] = Counter()
FAIL: set[str] = set()
TEMPLATES: dict[str, Template] = {}
"""What each file in the project's templates folder currently defines (see ``publish``)."""


class S(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    FAIL.clear()
    TEMPLATES.clear()


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


def chain(
    name: str, *nodes: str, version: str = "1", sleep: dict[str, float] | None = None
) -> Template:
    template = Template(name, state=S, version=version)
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


@pytest.fixture
def settings(shared_backend_url: str, settings_for: Callable[[str], Settings]) -> Settings:
    """A project over each database several processes can share (conftest's backends)."""
    return with_overrides(settings_for(shared_backend_url), lease_ttl=0.6)


async def committed(settings: Settings, run_id: str) -> tuple[list[str], int]:
    """Event kinds and node-record count of a run, as a separate process reads them."""
    async with open_ledger(settings.database_url) as ledger:
        kinds = [e.kind for e in await ledger.events(run_id)]
        records = await ledger.node_records(run_id)
    return kinds, len(records)


async def test_a_run_succeeds_and_another_process_sees_it(settings: Settings) -> None:
    template = chain("pipeline", "a", "b", "c")
    publish(settings, template)
    async with Runner.open(settings) as runner:
        summary = await runner.start("pipeline", {"n": 1})
    assert summary.status is RunStatus.SUCCEEDED
    assert [(r.node, r.status) for r in summary.records] == [
        ("a", NodeStatus.SUCCEEDED),
        ("b", NodeStatus.SUCCEEDED),
        ("c", NodeStatus.SUCCEEDED),
    ]
    assert all(r.duration is not None and r.metrics == {"calls": 1.0} for r in summary.records)
    assert summary.state == {"n": 4, "trail": ["a", "b", "c"]}

    run_id = summary.run.run_id
    kinds, n_records = await committed(settings, run_id)
    assert n_records == 3
    assert len(kinds) == summary.run.last_seq
    assert kinds[0] == "run.started" and kinds[-1] == "run.succeeded"

    async with Runner.open(settings) as again:
        seen = await again.status(run_id)
        listed = await again.ledger.list_runs(template="pipeline")
    assert seen.run == summary.run
    assert seen.records == summary.records
    assert seen.state == summary.state
    assert [r.run_id for r in listed] == [run_id]


async def test_retry_in_a_new_process_continues_from_the_checkpoint(settings: Settings) -> None:
    publish(settings, chain("pipeline", "a", "b", "c"))
    FAIL.add("b")
    async with Runner.open(settings) as runner:
        failed = await runner.start("pipeline", {})
    assert failed.status is RunStatus.FAILED
    assert (failed.run.failed_node, failed.run.failure_phase) == ("b", "stage")
    assert failed.state == {"n": 1, "trail": ["a"]}

    FAIL.clear()
    async with Runner.open(settings) as fresh:
        summary = await fresh.retry(failed.run.run_id)
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.run.attempt == 2
    assert CALLS == {"a": 1, "b": 2, "c": 1}
    assert summary.state == {"n": 3, "trail": ["a", "b", "c"]}
    b_records = sorted((r.attempt, r.status) for r in summary.records if r.node == "b")
    assert b_records == [(1, NodeStatus.FAILED), (2, NodeStatus.SUCCEEDED)]


async def test_a_queued_run_is_started_by_resume_in_another_process(settings: Settings) -> None:
    publish(settings, chain("pipeline", "a", "b"))
    async with Runner.open(settings) as runner:
        run = await runner.create("pipeline", {"n": 5})
        with pytest.raises(InputError):
            await runner.create("pipeline", {"n": operator})  # a module cannot be checkpointed
    assert run.status is RunStatus.QUEUED
    async with Runner.open(settings) as worker:
        summary = await worker.resume(run.run_id)
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state == {"n": 7, "trail": ["a", "b"]}


async def until_advancing(runner: Runner, run_id: str) -> None:
    """Until a process holds the run's lease (it is being advanced), as another process sees."""
    while True:
        try:
            run = await runner.ledger.get_run(run_id)
        except RunNotFound:
            run = None
        if run is not None and run.lease_holder is not None:
            return
        await asyncio.sleep(0.02)


async def test_a_second_process_cannot_advance_a_run_that_is_running(settings: Settings) -> None:
    publish(settings, chain("slow", "slow", "after", sleep={"slow": 0.5}))
    async with Runner.open(settings) as one, Runner.open(settings) as two:
        run = await one.create("slow", {})
        task = asyncio.create_task(one.resume(run.run_id))
        await until_advancing(two, run.run_id)
        with pytest.raises(LeaseHeld) as info:
            await two.resume(run.run_id)
        assert str(run.run_id) in str(info.value)
        summary = await task
    assert summary.status is RunStatus.SUCCEEDED
    assert CALLS == {"slow": 1, "after": 1}


async def test_cancel_from_another_process_stops_the_run_between_steps(
    settings: Settings,
) -> None:
    publish(settings, chain("slow", "slow", "after", sleep={"slow": 0.5}))
    async with Runner.open(settings) as one, Runner.open(settings) as two:
        task = asyncio.create_task(one.start("slow", {}, run_id="cancel-me"))
        while not CALLS["slow"]:  # cancel while the first step runs
            await asyncio.sleep(0.02)
        asked = await two.cancel("cancel-me")
        assert asked.cancel_requested is True
        summary = await task
    assert summary.status is RunStatus.CANCELLED
    assert CALLS == {"slow": 1}
    assert [r.node for r in summary.records] == ["slow"]
    assert (await committed(settings, "cancel-me"))[0][-1] == "run.cancelled"


async def ask(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["ask"] += 1
    return {"trail": [str(interrupt({"question": "go on?"}))]}


async def test_queued_and_waiting_runs_are_cancelled_at_once(settings: Settings) -> None:
    publish(settings, chain("pipeline", "a", "b"))
    asks = Template("asks", state=S).add_stage("ask", ask).add_stage("after", step("after"))
    publish(settings, asks.add_edge("ask", "after"))
    async with Runner.open(settings) as runner:
        queued = await runner.create("pipeline", {})
        waiting = await runner.start("asks", {})
    assert waiting.status is RunStatus.WAITING
    async with Runner.open(settings) as other:
        for run_id in (queued.run_id, waiting.run.run_id):
            cancelled = await other.cancel(run_id, actor="ann", note="not needed")
            assert cancelled.status is RunStatus.CANCELLED
            assert cancelled.finished_at is not None
            assert (await committed(settings, run_id))[0][-1] == "run.cancelled"
        [closed] = await other.ledger.waits(waiting.run.run_id)  # who and why are kept
        assert closed.reason == "the run was cancelled by ann: not needed"
        events = await other.ledger.events(waiting.run.run_id)
        assert events[-1].data == {"actor": "ann", "note": "not needed"}
    assert CALLS == {"ask": 1}


async def test_a_changed_template_needs_force_in_a_new_process(settings: Settings) -> None:
    old = chain("evolving", "a", "b")
    publish(settings, old)
    FAIL.add("b")
    async with Runner.open(settings) as runner:
        failed = await runner.start("evolving", {})
    FAIL.clear()
    new = chain("evolving", "a", "b", version="2")
    publish(settings, new)
    async with Runner.open(settings) as runner:
        with pytest.raises(TemplateChanged) as info:
            await runner.retry(failed.run.run_id)
        assert old.full_version in str(info.value)
        assert new.full_version in str(info.value)
        assert (await runner.ledger.get_run(failed.run.run_id)).status is RunStatus.FAILED
        summary = await runner.retry(failed.run.run_id, force=True)
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.run.template_version == new.full_version
    assert CALLS == {"a": 1, "b": 2}


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


async def test_registered_types_are_read_back_from_the_file(settings: Settings) -> None:
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
