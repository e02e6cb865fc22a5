"""More of what every ledger promises its callers (conformance, every backend): events written
on their own reach the publisher, numbered."""

from __future__ import annotations

import uuid

import pytest

from stageline.errors import InvalidTransition, LeaseHeld
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


async def test_a_cancel_wins_only_over_an_ending_the_run_could_take(ledger: LedgerStore) -> None:
    """``expect`` holds for the cancel that wins too: a run not in an expected status is
    refused, whether or not a cancel was asked."""
    run = _run(RunStatus.QUEUED)
    await ledger.create_run(run)
    await ledger.request_cancel(run.run_id)
    with pytest.raises(InvalidTransition, match=f"run {run.run_id} is queued"):
        await ledger.transition(
            run.run_id,
            RunStatus.SUCCEEDED,
            expect=[RunStatus.RUNNING],
            events=[Event(run_id=run.run_id, kind="run.succeeded")],
            cancel_wins=[Event(run_id=run.run_id, kind="run.cancelled")],
        )
    after = await ledger.get_run(run.run_id)
    assert (after.status, after.cancel_requested) == (RunStatus.QUEUED, True)
    assert await ledger.events(run.run_id) == []


async def test_a_cancel_that_wins_records_where_the_events_end(ledger: LedgerStore) -> None:
    """The run's ``last_seq`` (where the UI starts reading) is its last event's, also when a
    cancel won over the ending and the lease was given up with it."""
    run = _run(RunStatus.RUNNING)
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, "host:1:me", 60)
    await ledger.append_events(
        run.run_id, [Event(run_id=run.run_id, kind="a"), Event(run_id=run.run_id, kind="b")]
    )
    await ledger.request_cancel(run.run_id)
    ended = await ledger.transition(
        run.run_id,
        RunStatus.SUCCEEDED,
        release=True,
        events=[Event(run_id=run.run_id, kind="run.succeeded")],
        cancel_wins=[Event(run_id=run.run_id, kind="run.cancelled")],
    )
    written = await ledger.events(run.run_id)
    assert [(e.seq, e.kind) for e in written] == [(1, "a"), (2, "b"), (3, "run.cancelled")]
    assert ended.status is RunStatus.CANCELLED and ended.last_seq == 3
    assert (await ledger.get_run(run.run_id)).last_seq == 3


async def test_a_transition_expecting_no_status_is_refused(ledger: LedgerStore) -> None:
    """``expect=[]`` (a caller whose list of allowed statuses came out empty) allows none."""
    run = _run(RunStatus.QUEUED)
    await ledger.create_run(run)
    with pytest.raises(InvalidTransition, match=f"run {run.run_id} is queued"):
        await ledger.transition(run.run_id, RunStatus.RUNNING, expect=[])
    assert (await ledger.get_run(run.run_id)).status is RunStatus.QUEUED
