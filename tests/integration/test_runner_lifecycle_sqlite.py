"""The runner's lifecycle on a real SQLite file, as its callers (CLI, server, worker) rely on
it: what create, start, resume, retry, cancel and status record and refuse."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import InputError, InvalidTransition, LeaseHeld
from stageline.ledger import NodeStatus, RunClaim, RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

CALLS: Counter[str] = Counter()
BROKEN: set[str] = set()
SEEN_RUN: list[Any] = []
"""The run as the ledger had it while a stage ran (read through a service)."""


class S(TypedDict, total=False):
    n: int
    text: str
    handle: Any


async def add(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["add"] += 1
    if "add" in BROKEN:
        raise ValueError("add is broken")
    if "ledger" in ctx.services:
        SEEN_RUN.append(await ctx.services["ledger"].get_run(ctx.run_id))
    return {"n": state.get("n", 0) + 1}


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    CALLS["write"] += 1
    return {"text": f"n={state.get('n', 0)}"}


PLAIN = Template("lifecycle", state=S)
PLAIN.add_stage("write", write)
PLAIN.add_stage("add", add)
PLAIN.add_sequence("write", "add")

GATED = Template("lifecycle_gate", state=S)
GATED.add_stage("write", write)
GATED.add_gate("approval")
GATED.add_stage("add", add)
GATED.add_sequence("write", "approval", "add")


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    BROKEN.clear()
    SEEN_RUN.clear()


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


async def kinds(runner: Runner, run_id: str) -> list[str]:
    return [e.kind for e in await runner.ledger.events(run_id)]


async def event(runner: Runner, run_id: str, kind: str) -> Any:
    [found] = [e for e in await runner.ledger.events(run_id) if e.kind == kind]
    return found


# -- create and start -------------------------------------------------------------------------


async def test_a_created_run_is_queued_with_its_inputs_until_resumed(runner: Runner) -> None:
    run = await runner.create(
        GATED, {"n": 2}, run_id="made-1", deadlines={"approval": "30s"}, budget={"tokens": 999}
    )
    assert (run.run_id, run.status, run.attempt) == ("made-1", RunStatus.QUEUED, 1)
    assert (run.template, run.template_version) == ("lifecycle_gate", GATED.full_version)
    assert run.inputs["n"] == 2
    assert run.inputs["stageline_deadlines"] == {"approval": 30.0}
    assert run.inputs["stageline_budget"]["tokens"] == 999
    stored = await runner.ledger.get_run("made-1")
    assert (stored.status, stored.inputs) == (RunStatus.QUEUED, run.inputs)
    queued = await event(runner, "made-1", "run.queued")
    assert queued.data == {"template": "lifecycle_gate", "version": GATED.full_version}
    assert await kinds(runner, "made-1") == ["run.queued"] and CALLS == {}
    # Resumed, it starts from its inputs (without what stageline keeps beside them).
    waiting = await runner.resume("made-1")
    assert waiting.status is RunStatus.WAITING
    resumed = await event(runner, "made-1", "run.resumed")
    assert resumed.data == {
        "attempt": 1,
        "template": "lifecycle_gate",
        "version": GATED.full_version,
    }
    assert waiting.state == {"n": 2, "text": "n=2"}
    [wait] = waiting.waits
    assert wait.deadline_at == pytest.approx(wait.requested_at + 30)


async def test_a_run_id_is_checked_before_anything_is_recorded(runner: Runner) -> None:
    for bad in ("../x", "-dash"):
        with pytest.raises(InputError, match="is not a valid run id"):
            await runner.create(PLAIN, {}, run_id=bad)
        with pytest.raises(InputError, match="is not a valid run id"):
            await runner.start(PLAIN, {}, run_id=bad)
    assert await runner.ledger.list_runs() == [] and CALLS == {}


async def test_a_started_run_says_so_and_ends_without_a_lease(runner: Runner) -> None:
    summary = await runner.start(
        PLAIN, {"n": 5}, run_id="started-1", services={"ledger": runner.ledger}
    )
    [running] = SEEN_RUN  # while it ran, no other process could take it
    assert running.status is RunStatus.RUNNING and running.lease_holder is not None
    assert running.lease_expires_at is not None and running.lease_expires_at > time.time()
    run = summary.run
    assert (run.run_id, run.status, run.template) == ("started-1", RunStatus.SUCCEEDED, "lifecycle")
    assert (run.lease_holder, run.lease_expires_at) == (None, None)
    assert run.finished_at is not None
    started = await event(runner, "started-1", "run.started")
    assert started.data == {"attempt": 1, "template": "lifecycle", "version": PLAIN.full_version}
    assert [(r.node, r.status) for r in summary.records] == [
        ("write", NodeStatus.SUCCEEDED),
        ("add", NodeStatus.SUCCEEDED),
    ]
    assert summary.records == await runner.ledger.node_records("started-1")
    assert summary.state == {"n": 6, "text": "n=5"}
    assert summary.waits == []


async def test_a_run_that_waits_lists_what_it_waits_on(runner: Runner) -> None:
    summary = await runner.start(GATED, {})
    assert summary.status is RunStatus.WAITING
    assert summary.waits == await runner.pending(summary.run.run_id)
    assert [w.name for w in summary.waits] == ["approval"]
    assert summary.run.lease_holder is None


async def test_inputs_are_checked_against_the_state_with_messages_that_say_why(
    runner: Runner,
) -> None:
    with pytest.raises(InputError) as raised:
        await runner.start(PLAIN, {"n": 1, "colour": "red"})
    assert str(raised.value) == (
        "unknown input 'colour' for template 'lifecycle'; its state keys are: handle, n, text"
    )
    with pytest.raises(InputError) as raised:
        await runner.create(PLAIN, {"handle": time})  # a module: no checkpoint can hold it
    assert str(raised.value).startswith("input 'handle' cannot be checkpointed: ")
    assert str(raised.value).endswith("; pass live objects (clients, handles) as services instead")
    assert await runner.ledger.list_runs() == [] and CALLS == {}


# -- resume and retry -------------------------------------------------------------------------


async def test_only_a_run_that_can_go_on_is_resumed(runner: Runner) -> None:
    done = (await runner.start(PLAIN, {}, run_id="done-1")).run
    with pytest.raises(InvalidTransition) as raised:
        await runner.resume(done.run_id)
    assert str(raised.value) == "run done-1 is succeeded; there is nothing to resume"
    BROKEN.add("add")
    await runner.start(PLAIN, {}, run_id="failed-1")
    with pytest.raises(InvalidTransition) as raised:
        await runner.resume("failed-1")
    assert str(raised.value) == "run failed-1 failed; use `stageline retry failed-1`"


async def test_a_retry_is_the_next_attempt_and_shows_no_stale_error_while_it_runs(
    runner: Runner,
) -> None:
    waiting = (await runner.start(GATED, {}, run_id="waiting-1")).run
    with pytest.raises(InvalidTransition) as raised:
        await runner.retry(waiting.run_id)
    assert str(raised.value) == "run waiting-1 is waiting; only a failed run can be retried"
    CALLS.clear()
    BROKEN.add("add")
    failed = (await runner.start(PLAIN, {"n": 1}, run_id="retried-1")).run
    assert failed.error is not None and failed.failed_node == "add"
    BROKEN.clear()
    done = await runner.retry("retried-1", services={"ledger": runner.ledger})
    assert done.status is RunStatus.SUCCEEDED and done.run.attempt == 2
    [running] = SEEN_RUN
    assert (running.status, running.attempt) == (RunStatus.RUNNING, 2)
    assert (running.error, running.failure_phase, running.failed_node) == (None, None, None)
    assert running.lease_holder is not None
    retried = await event(runner, "retried-1", "run.retried")
    assert retried.data == {"attempt": 2, "template": "lifecycle", "version": PLAIN.full_version}
    assert CALLS == {"write": 1, "add": 2}  # the failed node only, from the checkpoint
    assert [(r.node, r.attempt) for r in done.records] == [
        ("write", 1),
        ("add", 1),
        ("add", 2),
    ]


async def test_a_resume_that_finds_the_run_moved_on_takes_no_lease(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await runner.create(PLAIN, {})
    claim = runner.ledger.claim

    async def cancelled_meanwhile(run_id: str, wanted: RunClaim) -> Any:
        # The claim (lease and status in one transaction) comes after the cancel.
        await runner.ledger.transition(run_id, RunStatus.CANCELLED, expect=[RunStatus.QUEUED])
        return await claim(run_id, wanted)

    monkeypatch.setattr(runner.ledger, "claim", cancelled_meanwhile)
    with pytest.raises(InvalidTransition):
        await runner.resume(run.run_id)
    after = await runner.ledger.get_run(run.run_id)
    assert after.status is RunStatus.CANCELLED and after.lease_holder is None
    assert "run.resumed" not in await kinds(runner, run.run_id) and CALLS == {}


async def test_a_drained_runner_leaves_new_runs_queued_for_another_process(
    runner: Runner, sqlite_settings: Settings
) -> None:
    assert runner.drain("shutdown") == 0  # nothing in flight
    stopped = await runner.start(PLAIN, {}, run_id="drained-1")
    assert stopped.status is RunStatus.QUEUED and CALLS == {}
    assert stopped.run.lease_holder is None
    async with Runner.open(sqlite_settings, deliver=False) as other:
        other.load(PLAIN)
        assert (await other.resume("drained-1")).status is RunStatus.SUCCEEDED


# -- cancel ---------------------------------------------------------------------------------


async def test_a_cancel_ends_a_run_no_live_process_advances(runner: Runner) -> None:
    queued = await runner.create(PLAIN, {})
    before = time.time()
    cancelled = await runner.cancel(queued.run_id)
    assert cancelled.status is RunStatus.CANCELLED
    assert cancelled.finished_at is not None and cancelled.finished_at >= before
    said = await event(runner, queued.run_id, "run.cancelled")
    assert said.level == "warning"
    with pytest.raises(InvalidTransition) as raised:
        await runner.cancel(queued.run_id)
    assert str(raised.value) == f"run {queued.run_id} already cancelled"


async def test_a_run_whose_process_died_is_cancelled_at_once(runner: Runner) -> None:
    run = await runner.create(PLAIN, {})
    await runner.ledger.transition(
        run.run_id, RunStatus.RUNNING, lease_holder="elsewhere:1:x", lease_expires_at=1.0
    )
    assert (await runner.cancel(run.run_id)).status is RunStatus.CANCELLED


async def test_a_run_a_live_process_advances_is_asked_to_stop(runner: Runner) -> None:
    run = await runner.create(PLAIN, {})
    await runner.ledger.acquire_lease(run.run_id, "elsewhere:1:x", 60)
    await runner.ledger.transition(run.run_id, RunStatus.RUNNING, expect=[RunStatus.QUEUED])
    asked = await runner.cancel(run.run_id)
    assert (asked.status, asked.cancel_requested) == (RunStatus.RUNNING, True)
    with pytest.raises(LeaseHeld):
        await runner.resume(run.run_id)


@pytest.mark.parametrize("where", ["waiting", "failed"])
async def test_a_waiting_or_failed_run_can_be_cancelled(runner: Runner, where: str) -> None:
    if where == "failed":
        BROKEN.add("add")
    run_id = (await runner.start(GATED if where == "waiting" else PLAIN, {})).run.run_id
    assert (await runner.cancel(run_id)).status is RunStatus.CANCELLED
    for wait in await runner.ledger.waits(run_id):
        assert (wait.status, wait.reason) == (WaitStatus.CLOSED, "the run was cancelled")
    assert await runner.pending(run_id) == []


# -- status ---------------------------------------------------------------------------------


async def test_status_shows_the_run_as_recorded_with_its_state(runner: Runner) -> None:
    waiting = await runner.start(GATED, {"n": 3})
    run_id = waiting.run.run_id
    shown = await runner.status(run_id)
    assert shown.run == await runner.ledger.get_run(run_id)
    assert shown.state == {"n": 3, "text": "n=3"}
    assert shown.records == await runner.ledger.node_records(run_id)
    assert shown.waits == await runner.ledger.waits(run_id) and len(shown.waits) == 1
    assert shown.checkpoint_error is None
    assert shown.lineage == await runner.ledger.lineage(run_id)
    assert shown.forks == []


async def test_status_of_a_run_whose_template_is_gone_still_shows_the_ledger(
    runner: Runner, sqlite_settings: Settings
) -> None:
    run_id = (await runner.start(GATED, {"n": 3})).run.run_id
    async with Runner.open(sqlite_settings, deliver=False) as other:  # never given the template
        shown = await other.status(run_id)
    assert shown.state == {} and shown.checkpoint_error is None
    assert shown.run.status is RunStatus.WAITING
    assert [r.node for r in shown.records] == ["write", "approval"]
    assert [w.name for w in shown.waits] == ["approval"]


async def test_a_node_stopped_midway_runs_again_as_a_new_try(runner: Runner) -> None:
    """Ctrl-C (here: the advance's task cancelled) stops a node midway; the resume runs it
    again as try 2, and both tries keep their own record."""
    entered, never = asyncio.Event(), asyncio.Event()

    async def stuck_once(state: S, ctx: StageContext) -> dict[str, Any]:
        CALLS["stuck"] += 1
        if CALLS["stuck"] == 1:
            entered.set()
            await never.wait()
        return {"n": 1}

    template = Template("stopped", state=S).add_stage("stuck", stuck_once)
    advance = asyncio.create_task(runner.start(template, {}, run_id="stopped-1"))
    await entered.wait()
    advance.cancel()
    with pytest.raises(asyncio.CancelledError):
        await advance
    done = await runner.resume("stopped-1")
    assert done.status is RunStatus.SUCCEEDED and CALLS["stuck"] == 2
    tries = [(r.attempt, r.try_no, r.status, r.failure_phase) for r in done.records]
    assert tries == [
        (1, 1, NodeStatus.FAILED, "interrupted"),
        (1, 2, NodeStatus.SUCCEEDED, None),
    ]
