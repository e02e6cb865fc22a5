"""Listing runs (its default page, the retention cutoff) and staged writes that commit on their
own when nothing else commits them. Conformance: every backend."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from stageline.ledger import (
    Backend,
    Event,
    LedgerStore,
    NodeRecord,
    NodeStatus,
    Run,
    RunStatus,
)


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


def _run(template: str, created_at: float = 1.0, updated_at: float = 1.0) -> Run:
    return Run(
        run_id=f"f-{uuid.uuid4().hex[:10]}",
        template=template,
        template_version="1",
        status=RunStatus.QUEUED,
        created_at=created_at,
        updated_at=updated_at,
    )


async def test_list_runs_gives_the_newest_hundred_by_default(ledger: LedgerStore) -> None:
    template = f"many-{uuid.uuid4().hex[:6]}"
    made = [_run(template, created_at=float(n)) for n in range(101)]
    for run in made:
        await ledger.create_run(run)
    listed = await ledger.list_runs(template=template)
    assert [r.run_id for r in listed] == [r.run_id for r in reversed(made[1:])]


async def test_updated_before_lists_only_runs_idle_since_strictly_before(
    ledger: LedgerStore,
) -> None:
    template = f"idle-{uuid.uuid4().hex[:6]}"
    old = _run(template, created_at=1.0, updated_at=100.0)
    cutoff = _run(template, created_at=2.0, updated_at=200.0)
    for run in (old, cutoff):
        await ledger.create_run(run)
    idle = await ledger.list_runs(template=template, updated_before=200.0)
    assert [r.run_id for r in idle] == [old.run_id]
    assert len(await ledger.list_runs(template=template)) == 2


async def _events_once_committed(ledger: LedgerStore, run_id: str, count: int) -> list[Event]:
    """Wait (pytest-timeout bounds it) until ``count`` events of the run are readable."""
    while len(found := await ledger.events(run_id)) < count:
        await asyncio.sleep(0.02)
    return found


async def test_staged_writes_commit_on_their_own_without_a_flush(ledger: LedgerStore) -> None:
    run = _run("tpl")
    await ledger.create_run(run)
    ledger.stage_event(Event(run_id=run.run_id, kind="node.started", node="slow"))
    ledger.stage_node(
        NodeRecord(
            run_id=run.run_id,
            task_id="t1",
            attempt=1,
            try_no=1,
            node="slow",
            stage="mod:slow",
            status=NodeStatus.RUNNING,
            started_at=1000.0,
        )
    )
    [started] = await _events_once_committed(ledger, run.run_id, 1)
    assert (started.seq, started.kind) == (1, "node.started")
    assert [r.node for r in await ledger.node_records(run.run_id)] == ["slow"]

    # Again after a commit that took the staged rows itself, and after an automatic one.
    ledger.stage_event(Event(run_id=run.run_id, kind="node.progress"))
    await ledger.transition(run.run_id, RunStatus.RUNNING)
    ledger.stage_event(Event(run_id=run.run_id, kind="node.progress"))
    ledger.stage_event(Event(run_id=run.run_id, kind="node.progress"))
    found = await _events_once_committed(ledger, run.run_id, 4)
    assert [e.seq for e in found] == [1, 2, 3, 4]
    ledger.stage_event(Event(run_id=run.run_id, kind="node.finished"))
    found = await _events_once_committed(ledger, run.run_id, 5)
    assert found[-1].kind == "node.finished"
