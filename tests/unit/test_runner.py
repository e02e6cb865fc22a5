"""The runner over the in-memory double: lifecycle, failures, retry, cancel, leases, inputs."""

from __future__ import annotations

import asyncio
import operator
import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.types import interrupt
from pydantic import BaseModel

from stageline.config import Settings, with_overrides
from stageline.errors import (
    InputError,
    InvalidTransition,
    LeaseHeld,
    TemplateChanged,
    TemplateError,
)
from stageline.ledger import EventCategory, NodeStatus, RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext, legacy_stage, stage
from stageline.templates import Template
from stageline.testing import MemoryLedger, RecordingSink, memory_runner

CALLS: Counter[str] = Counter()
"""How many times each stage body ran (reset for every test)."""
FAIL: set[str] = set()
"""Stages that raise while named here."""
LOCK = threading.Lock()


class S(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]
    saw: str
    out: str
    db: str
    lock: Any


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    FAIL.clear()


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
async def runner(memory_settings: Settings, sink: RecordingSink) -> AsyncIterator[Runner]:
    async with memory_runner(memory_settings, sinks=(sink,)) as opened:
        yield opened


def step(name: str) -> Any:
    async def body(state: S, ctx: StageContext) -> dict[str, Any]:
        CALLS[name] += 1
        if name in FAIL:
            raise ValueError(f"{name} is broken")
        return {"n": state.get("n", 0) + 1, "trail": [name]}

    body.__name__ = body.__qualname__ = name
    return body


def chain(name: str, *nodes: str) -> Template:
    template = Template(name, state=S)
    for n in nodes:
        template.add_stage(n, step(n))
    template.add_sequence(*nodes)
    return template


# -- success and failure ----------------------------------------------------------------------


async def test_a_run_succeeds_with_one_record_per_node(runner: Runner, sink: RecordingSink) -> None:
    summary = await runner.start(chain("abc", "a", "b", "c"), {"n": 10})
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.run.finished_at is not None
    assert (summary.run.lease_holder, summary.run.lease_expires_at) == (None, None)
    assert [r.node for r in summary.records] == ["a", "b", "c"]
    for record in summary.records:
        assert record.status is NodeStatus.SUCCEEDED
        assert (record.attempt, record.try_no) == (1, 1)
        assert record.duration is not None and record.duration >= 0
    assert summary.state == {"n": 13, "trail": ["a", "b", "c"]}
    kinds = [e.kind for e in await runner.ledger.events(summary.run.run_id)]
    assert kinds[0] == "run.started"  # a foreground run starts running at once
    assert kinds[-1] == "run.succeeded"
    assert kinds.count("node.succeeded") == 3
    assert sink.kinds(summary.run.run_id) == kinds  # sinks see every committed event, in order


async def test_a_failing_node_fails_the_run_and_keeps_its_state(runner: Runner) -> None:
    FAIL.add("b")
    summary = await runner.start(chain("abc", "a", "b", "c"), {})
    run = summary.run
    assert run.status is RunStatus.FAILED
    assert run.failed_node == "b"
    assert run.failure_phase == "stage"
    assert run.error is not None and "ValueError: b is broken" in run.error
    by_node = {r.node: r for r in summary.records}
    assert set(by_node) == {"a", "b"}
    assert by_node["b"].status is NodeStatus.FAILED
    assert by_node["b"].error == "ValueError: b is broken"
    assert by_node["b"].failure_phase == "stage"
    assert by_node["b"].duration is not None
    assert summary.state == {"n": 1, "trail": ["a"]}  # what a did is kept
    assert CALLS == {"a": 1, "b": 1}
    failed = [e for e in await runner.ledger.events(run.run_id) if e.kind == "run.failed"]
    assert failed[0].node == "b"
    assert failed[0].category is EventCategory.ERROR


async def test_retry_continues_from_the_checkpoint_as_the_next_attempt(runner: Runner) -> None:
    FAIL.add("b")
    first = await runner.start(chain("abc", "a", "b", "c"), {})
    assert first.status is RunStatus.FAILED
    FAIL.clear()
    second = await runner.retry(first.run.run_id)
    assert second.status is RunStatus.SUCCEEDED
    assert second.run.attempt == 2
    assert (second.run.error, second.run.failed_node, second.run.failure_phase) == (None,) * 3
    assert CALLS == {"a": 1, "b": 2, "c": 1}  # a is not run again
    assert second.state == {"n": 3, "trail": ["a", "b", "c"]}
    got = sorted((r.node, r.attempt, r.status.value) for r in second.records)
    assert got == [
        ("a", 1, "succeeded"),
        ("b", 1, "failed"),
        ("b", 2, "succeeded"),
        ("c", 2, "succeeded"),
    ]
    with pytest.raises(InvalidTransition, match="only a failed run"):
        await runner.retry(first.run.run_id)


class Flaky(Exception):
    pass


@stage(retry=3)
async def flaky(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["flaky"] += 1
    if CALLS["flaky"] < 3:
        raise Flaky(f"try {ctx.try_no}")
    return {"saw": f"try {ctx.try_no}"}


async def test_a_stage_with_retries_that_fails_twice_then_succeeds(runner: Runner) -> None:
    template = Template("flaky", state=S).add_stage("flaky", flaky)
    summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    assert CALLS["flaky"] == 3
    assert summary.state["saw"] == "try 3"
    tries = [(r.try_no, r.status, r.error) for r in summary.records]
    assert tries == [
        (1, NodeStatus.FAILED, "Flaky: try 1"),
        (2, NodeStatus.FAILED, "Flaky: try 2"),
        (3, NodeStatus.SUCCEEDED, None),
    ]


@stage(timeout=0.2)
async def sleepy(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["sleepy"] += 1
    await asyncio.sleep(5)
    return {"saw": "woke"}


async def test_a_stage_past_its_timeout_fails_in_phase_timeout(runner: Runner) -> None:
    template = Template("sleepy", state=S).add_stage("sleepy", sleepy)
    summary = await runner.start(template, {})
    assert summary.status is RunStatus.FAILED
    assert summary.run.failure_phase == "timeout"
    assert summary.run.failed_node == "sleepy"
    assert summary.run.error is not None and "timeout" in summary.run.error.lower()
    [record] = summary.records
    assert (record.status, record.failure_phase) == (NodeStatus.FAILED, "timeout")
    assert record.duration is not None and record.duration > 0


# -- inputs and services ----------------------------------------------------------------------


async def uses_lock(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["uses_lock"] += 1
    return {"saw": "the lock" if ctx.services["lock"] is LOCK else "something else"}


async def test_an_input_that_cannot_be_checkpointed_is_refused_before_any_node_runs(
    runner: Runner,
) -> None:
    template = Template("locky", state=S).add_stage("uses_lock", uses_lock)
    with pytest.raises(InputError, match="'lock'") as info:
        await runner.start(template, {"n": 1, "lock": LOCK})  # type: ignore[dict-item]
    assert "services" in str(info.value)
    assert CALLS == {}
    assert await runner.ledger.list_runs() == []


async def test_a_live_object_passed_as_a_service_reaches_the_stage(runner: Runner) -> None:
    template = Template("locky", state=S).add_stage("uses_lock", uses_lock)
    summary = await runner.start(template, {"n": 1}, services={"lock": LOCK})
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state["saw"] == "the lock"
    assert "lock" not in summary.run.inputs


async def test_an_unknown_input_key_lists_the_state_keys(runner: Runner) -> None:
    with pytest.raises(InputError, match="'topic'") as info:
        await runner.start(chain("one", "a"), {"topic": "x"})
    for key in ("n", "trail", "saw", "out"):
        assert key in str(info.value)
    assert CALLS == {}


# -- loops and fan-out ------------------------------------------------------------------------


async def test_a_loop_past_its_bound_fails_the_run_naming_the_loop(runner: Runner) -> None:
    template = Template("review_loop", state=S)
    for n in ("plan", "review"):
        template.add_stage(n, step(n))
    template.add_edge("plan", "review")
    template.add_route("review", lambda s: "again", {"again": "plan", "done": "END"})
    template.add_loop("revise", head="plan", max_iterations=2)
    summary = await runner.start(template, {})
    run = summary.run
    assert run.status is RunStatus.FAILED
    assert run.error is not None and "'revise'" in run.error
    assert "Recursion" not in run.error
    assert run.failure_phase == "loop_bound"
    assert run.failed_node == "plan"
    assert CALLS == {"plan": 2, "review": 2}


async def test_a_loop_with_on_exhausted_routes_there_instead(runner: Runner) -> None:
    template = Template("review_loop", state=S)
    for n in ("plan", "review", "park"):
        template.add_stage(n, step(n))
    template.add_edge("plan", "review")
    template.add_route("review", lambda s: "again", {"again": "plan", "done": "END"})
    template.add_loop("revise", head="plan", max_iterations=2, on_exhausted="park")
    summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    assert CALLS == {"plan": 2, "review": 2, "park": 1}
    assert summary.state["trail"] == ["plan", "review", "plan", "review", "park"]


@stage(writes=["trail"])
async def critic_x(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"trail": ["x"]}


@stage(writes=["trail"])
def critic_y(state: S, ctx: StageContext) -> dict[str, Any]:  # a sync stage works too
    return {"trail": ["y"]}


async def merge(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"saw": ",".join(sorted(state["trail"]))}


async def test_fan_out_with_a_reducer_merges_both_branches(runner: Runner) -> None:
    template = Template("fan", state=S)
    template.add_stage("start", step("start")).add_stage("x", critic_x).add_stage("y", critic_y)
    template.add_stage("merge", merge)
    template.add_fanout("start", ["x", "y"], join="merge")
    summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    assert sorted(summary.state["trail"]) == ["start", "x", "y"]
    assert summary.state["saw"] == "start,x,y"
    assert {r.node for r in summary.records} == {"start", "x", "y", "merge"}


@stage(writes=["out"])
async def writes_out_a(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"out": "a"}


@stage(writes=["out"])
async def writes_out_b(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"out": "b"}


def test_fan_in_without_a_reducer_is_refused_by_validate() -> None:
    template = Template("fan_in", state=S)
    template.add_stage("start", step("start"))
    template.add_stage("a", writes_out_a).add_stage("b", writes_out_b)
    template.add_fanout("start", ["a", "b"])
    with pytest.raises(TemplateError, match="'out'") as info:
        template.validate()
    assert "reducer" in str(info.value)
    assert "test_runner.py" in str(info.value)


async def test_an_undeclared_fan_in_conflict_fails_the_run_in_phase_fan_in(runner: Runner) -> None:
    fast_flaky = flaky.with_options(
        retry={"max_attempts": 3, "initial_interval": 0.01, "jitter": False}
    )
    template = Template("fan_in_runtime", state=S).add_stage("flaky", fast_flaky)
    template.add_stage("a", writes_out_a.with_options(writes=None))
    template.add_stage("b", writes_out_b.with_options(writes=None))
    template.add_fanout("flaky", ["a", "b"])
    summary = await runner.start(template, {})
    run = summary.run
    assert run.status is RunStatus.FAILED
    # flaky failed twice on the way but recovered: it is not what failed the run
    assert run.failure_phase == "fan_in"
    assert run.failed_node is None
    assert run.error is not None and "reducer" in run.error
    assert summary.state["saw"] == "try 3"  # the last good checkpoint's state
    assert (await runner.status(run.run_id)).state == summary.state


# -- cancel, leases, template changes ---------------------------------------------------------


async def test_cancelling_a_queued_run_marks_it_cancelled(runner: Runner) -> None:
    run = await runner.create(chain("abc", "a", "b"), {})
    assert run.status is RunStatus.QUEUED
    cancelled = await runner.cancel(run.run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.finished_at is not None
    with pytest.raises(InvalidTransition):
        await runner.resume(run.run_id)
    with pytest.raises(InvalidTransition, match="already cancelled"):
        await runner.cancel(run.run_id)
    assert CALLS == {}


async def test_a_cancel_accepted_before_its_process_died_wins_on_resume(
    runner: Runner,
) -> None:
    run = await runner.create(chain("abc2", "a", "b"), {})
    await runner.ledger.transition(
        run.run_id, RunStatus.RUNNING, lease_holder="elsewhere:1:x", lease_expires_at=0.0
    )
    await runner.ledger.request_cancel(run.run_id)  # then that process died
    resumed = await runner.resume(run.run_id)
    assert resumed.status is RunStatus.CANCELLED
    assert CALLS == {}  # not one step more


async def ask(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["ask"] += 1
    answer = interrupt({"question": "go on?"})
    return {"saw": str(answer)}


async def test_cancelling_a_waiting_run_marks_it_cancelled(runner: Runner) -> None:
    template = Template("asks", state=S).add_stage("ask", ask).add_stage("after", step("after"))
    template.add_edge("ask", "after")
    waiting = await runner.start(template, {})
    assert waiting.status is RunStatus.WAITING
    assert [r.status for r in waiting.records] == [NodeStatus.WAITING]
    cancelled = await runner.cancel(waiting.run.run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert "after" not in CALLS


async def slow(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["slow"] += 1
    await asyncio.sleep(0.5)
    return {"trail": ["slow"]}


def slow_then_after(name: str = "slow_after") -> Template:
    template = Template(name, state=S).add_stage("slow", slow).add_stage("after", step("after"))
    return template.add_edge("slow", "after")


async def test_cancelling_a_running_run_stops_it_between_steps(
    memory_settings: Settings,
) -> None:
    fast = with_overrides(memory_settings, lease_ttl=0.6)
    async with memory_runner(fast) as runner:
        template = slow_then_after()
        task = asyncio.create_task(runner.start(template, {}, run_id="to-cancel"))
        await asyncio.sleep(0.1)
        requested = await runner.cancel("to-cancel")
        assert requested.status is RunStatus.RUNNING  # a live process advances it: asked, not done
        assert requested.cancel_requested is True
        summary = await asyncio.wait_for(task, 5)
    assert summary.status is RunStatus.CANCELLED
    assert CALLS == {"slow": 1}
    assert [(r.node, r.status) for r in summary.records] == [("slow", NodeStatus.SUCCEEDED)]


async def test_a_second_concurrent_advance_of_a_run_gets_lease_held(runner: Runner) -> None:
    template = slow_then_after()
    run = await runner.create(template, {})
    other = Runner(runner.settings, runner.backend)  # another runner on the same database
    other.load(template)
    first = asyncio.create_task(runner.resume(run.run_id))
    await asyncio.sleep(0.1)
    with pytest.raises(LeaseHeld, match=run.run_id):
        await other.resume(run.run_id)
    with pytest.raises(LeaseHeld):  # the same runner may not advance it twice at once either
        await runner.resume(run.run_id)
    summary = await first
    assert summary.status is RunStatus.SUCCEEDED
    assert CALLS == {"slow": 1, "after": 1}


async def test_resuming_after_the_template_changed_needs_force(runner: Runner) -> None:
    FAIL.add("b")
    old = chain("evolving", "a", "b")
    first = await runner.start(old, {})
    assert first.status is RunStatus.FAILED
    FAIL.clear()
    new = chain("evolving", "a", "b", "c")  # one more stage and edge: a new version
    assert new.full_version != old.full_version
    runner.load(new)
    with pytest.raises(TemplateChanged) as info:
        await runner.retry(first.run.run_id)
    assert old.full_version in str(info.value)
    assert new.full_version in str(info.value)
    summary = await runner.retry(first.run.run_id, force=True)
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.run.template_version == new.full_version
    assert CALLS == {"a": 1, "b": 2, "c": 1}


# -- what stages report -----------------------------------------------------------------------


async def measured(state: S, ctx: StageContext) -> dict[str, Any]:
    ctx.metric("tokens", 3)
    ctx.metric("tokens", 4.5)
    ctx.metric("cost", 0.25)
    ctx.log.info("hello", k=1)
    ctx.log.warning("careful")
    return {}


async def test_metrics_and_log_lines_reach_the_record_and_the_events(
    runner: Runner, sink: RecordingSink
) -> None:
    summary = await runner.start(Template("measured", state=S).add_stage("measured", measured), {})
    [record] = summary.records
    assert record.metrics == {"tokens": 7.5, "cost": 0.25}
    logs = await runner.ledger.events(summary.run.run_id, categories=["log"])
    assert [(e.kind, e.node, e.level, e.message, dict(e.data)) for e in logs] == [
        ("stage.log", "measured", "info", "hello", {"k": 1}),
        ("stage.log", "measured", "warning", "careful", {}),
    ]
    finished = [e for e in sink.events if e.kind == "node.succeeded"]
    assert finished[0].data["metrics"] == {"tokens": 7.5, "cost": 0.25}
    assert [e.seq for e in sink.events if e.kind == "stage.log"] == [e.seq for e in logs]


class LegacySync:
    name = "legacy_sync"

    def execute(self, context: dict[str, Any]) -> dict[str, Any]:
        CALLS["legacy_sync"] += 1
        assert context["db"] is LOCK  # services are merged into the legacy context
        return {
            "n": context["n"] + 1,
            "db": "a live handle",
            "run_id": "nope",
            "saw": context["run_id"],
        }


class LegacyAsync:
    async def execute(self, context: dict[str, Any]) -> dict[str, Any]:
        CALLS["legacy_async"] += 1
        kind = type(context["db"]).__name__
        return {"n": context["n"] * 10, "db": context["db"], "trail": [kind]}


async def test_legacy_objects_see_services_and_do_not_return_them(runner: Runner) -> None:
    template = Template("legacy", state=S)
    template.add_stage("sync", legacy_stage(LegacySync()))
    template.add_stage("async", legacy_stage(LegacyAsync()))
    template.add_edge("sync", "async")
    summary = await runner.start(template, {"n": 1}, services={"db": LOCK})
    assert summary.status is RunStatus.SUCCEEDED, summary.run.error
    assert CALLS == {"legacy_sync": 1, "legacy_async": 1}
    assert summary.state["n"] == 20
    assert summary.state["saw"] == summary.run.run_id
    assert summary.state["trail"] == ["lock"]
    assert "db" not in summary.state  # the service key was dropped from what they returned


async def test_memory_runner_opens_over_the_in_memory_ledger() -> None:
    async with memory_runner() as runner:
        assert isinstance(runner.ledger, MemoryLedger)
        assert runner.settings.database_url == "memory://"
        summary = await runner.start(chain("abc", "a"), {})
        assert summary.status is RunStatus.SUCCEEDED
        assert summary.run.run_id in {r.run_id for r in await runner.ledger.list_runs()}


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


async def test_types_a_template_registers_survive_checkpoints(runner: Runner) -> None:
    template = Template("findings", state=WithFinding, checkpoint_types=[Finding])
    template.add_stage("inspect", inspect_finding)
    FAIL.add("inspect")
    failed = await runner.start(template, {"finding": Finding(claim="x")})
    assert failed.status is RunStatus.FAILED
    FAIL.clear()
    summary = await runner.retry(failed.run.run_id)  # reads the input back from the checkpoint
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state["kind"] == "Finding"
    assert summary.state["finding"] == Finding(claim="x")


async def test_a_type_no_one_registered_is_refused_as_input(runner: Runner) -> None:
    template = Template("findings", state=WithFinding).add_stage("inspect", inspect_finding)
    with pytest.raises(InputError, match=r"'finding'.*Finding"):
        await runner.start(template, {"finding": Finding(claim="x")})
    with pytest.raises(InputError, match=r"'finding'.*Finding at \[0\]"):
        await runner.start(template, {"finding": [Finding(claim="x")]})


class BrokenSink:
    def emit(self, event: Any, **future_kwargs: Any) -> None:
        raise ConnectionError("webhook down")


async def test_a_failing_sink_does_not_hurt_the_run(memory_settings: Settings) -> None:
    kept = RecordingSink()
    async with memory_runner(memory_settings, sinks=(BrokenSink(), kept)) as runner:
        summary = await runner.start(chain("abc", "a", "b"), {})
        assert summary.status is RunStatus.SUCCEEDED
        assert runner.bus.failures == len(kept.events) > 0
    assert kept.kinds()[-1] == "run.succeeded"
