"""More of what every ledger promises its callers (conformance, every backend): events written
on their own reach the publisher, numbered."""

from __future__ import annotations

import uuid

import pytest

from stageline.errors import LeaseHeld
from stageline.ledger import Backend, Event, LedgerStore, Run, RunStatus


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


def _run(status: RunStatus = RunStatus.QUEUED) -> Run:
    return Run(
        run_id=f"m-{uuid.uuid4().hex[:10]}", template="tpl", template_version="1", status=status
    )


async def test_appended_events_reach_the_publisher_numbered(ledger: LedgerStore) -> None:
    published: list[Event] = []
    ledger.publisher = published.extend
    run = _run()
    await ledger.create_run(run, events=[Event(run_id=run.run_id, kind="run.queued")])
    written = await ledger.append_events(
        run.run_id,
        [Event(run_id=run.run_id, kind="note.one"), Event(run_id=run.run_id, kind="note.two")],
    )
    assert [(e.seq, e.kind) for e in written] == [(2, "note.one"), (3, "note.two")]
    assert [(e.seq, e.kind) for e in published] == [
        (1, "run.queued"),
        (2, "note.one"),
        (3, "note.two"),
    ]


async def test_a_held_lease_is_refused_naming_the_run_and_its_holder(ledger: LedgerStore) -> None:
    """What `stageline resume ID` prints when another process advances the run."""
    run = _run()
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, "host:1:me", 3600)
    with pytest.raises(LeaseHeld) as info:
        await ledger.acquire_lease(run.run_id, "host:2:you", 60)
    assert (info.value.run_id, info.value.holder) == (run.run_id, "host:1:me")
    assert str(info.value).startswith(f"run {run.run_id} is being advanced by host:1:me ")
