"""Leases and event numbering: what a runner holding a run's lease, and whoever comes after it,
rely on. Conformance (every backend); the two-process cases on every shared backend.

The lease holder numbers its run's events from a counter; these tests pin down that the counter
starts where the run's events end, that giving the lease up records where it stopped, and that
a process that gave it up numbers after anyone who wrote since.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.errors import InvalidTransition, LeaseHeld, RunNotFound
from stageline.ledger import Backend, Event, LedgerStore, Run, RunStatus, open_backend

DEAD_HOLDER = f"{socket.gethostname()}:999999:abc"


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


@pytest.fixture
async def two(shared_backend_url: str) -> AsyncIterator[tuple[LedgerStore, LedgerStore]]:
    """Two processes' ledgers over one database."""
    one = await open_backend(shared_backend_url, checkpoint_serde())
    other = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        yield one.ledger, other.ledger
    finally:
        await one.aclose()
        await other.aclose()


def _run(status: RunStatus = RunStatus.QUEUED) -> Run:
    return Run(
        run_id=f"l-{uuid.uuid4().hex[:10]}", template="tpl", template_version="1", status=status
    )


def _ev(run_id: str, kind: str) -> Event:
    return Event(run_id=run_id, kind=kind)


async def _seqs(ledger: LedgerStore, run_id: str) -> list[tuple[int, str]]:
    return [(e.seq, e.kind) for e in await ledger.events(run_id)]


# -- numbering under a lease ----------------------------------------------------------------


async def test_a_new_lease_holder_numbers_after_the_events_already_written(
    ledger: LedgerStore,
) -> None:
    run = _run()
    await ledger.create_run(run, events=[_ev(run.run_id, "run.queued")])
    await ledger.acquire_lease(run.run_id, "host:1:me", 60)
    written = await ledger.append_events(run.run_id, [_ev(run.run_id, "a"), _ev(run.run_id, "b")])
    assert [e.seq for e in written] == [2, 3]
    ledger.stage_event(_ev(run.run_id, "c"))
    await ledger.flush()
    assert await _seqs(ledger, run.run_id) == [(1, "run.queued"), (2, "a"), (3, "b"), (4, "c")]


async def test_the_first_event_of_a_leased_run_without_events_is_number_one(
    ledger: LedgerStore,
) -> None:
    run = _run()
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, "host:1:me", 60)
    [first] = await ledger.append_events(run.run_id, [_ev(run.run_id, "run.started")])
    assert first.seq == 1


async def test_giving_up_the_lease_records_the_last_event_number(ledger: LedgerStore) -> None:
    released = _run()
    await ledger.create_run(released)
    await ledger.acquire_lease(released.run_id, "host:1:me", 60)
    await ledger.append_events(released.run_id, [_ev(released.run_id, k) for k in "abc"])
    await ledger.release_lease(released.run_id, "host:1:me")
    assert (await ledger.get_run(released.run_id)).last_seq == 3

    ended = _run(RunStatus.RUNNING)
    await ledger.create_run(ended)
    await ledger.acquire_lease(ended.run_id, "host:1:me", 60)
    await ledger.append_events(ended.run_id, [_ev(ended.run_id, "a"), _ev(ended.run_id, "b")])
    done = await ledger.transition(
        ended.run_id,
        RunStatus.SUCCEEDED,
        release=True,
        events=[_ev(ended.run_id, "run.succeeded")],
    )
    assert done.last_seq == 3
    assert (await ledger.get_run(ended.run_id)).last_seq == 3


async def test_releasing_a_lease_never_held_here_changes_nothing(ledger: LedgerStore) -> None:
    run = _run()
    await ledger.create_run(run, events=[_ev(run.run_id, "run.queued")])
    await ledger.release_lease(run.run_id, "host:9:nobody")
    after = await ledger.get_run(run.run_id)
    assert (after.lease_holder, after.last_seq) == (None, 1)
    # Ending it with `release` from here (say, cancelling a queued run) works all the same.
    ended = await ledger.transition(
        run.run_id, RunStatus.CANCELLED, release=True, events=[_ev(run.run_id, "run.cancelled")]
    )
    assert (ended.status, ended.lease_holder) == (RunStatus.CANCELLED, None)
    assert (await ledger.get_run(run.run_id)).last_seq == 2


async def test_after_releasing_a_process_numbers_after_events_written_elsewhere(
    two: tuple[LedgerStore, LedgerStore],
) -> None:
    mine, theirs = two
    run = _run()
    await mine.create_run(run)
    await mine.acquire_lease(run.run_id, "host:1:me", 60)
    await mine.append_events(run.run_id, [_ev(run.run_id, "mine.1")])
    await mine.release_lease(run.run_id, "host:1:me")
    await theirs.append_events(run.run_id, [_ev(run.run_id, "theirs")])
    await mine.append_events(run.run_id, [_ev(run.run_id, "mine.2")])
    assert await _seqs(theirs, run.run_id) == [(1, "mine.1"), (2, "theirs"), (3, "mine.2")]


async def test_after_ending_a_run_a_process_numbers_after_events_written_elsewhere(
    two: tuple[LedgerStore, LedgerStore],
) -> None:
    mine, theirs = two
    run = _run(RunStatus.RUNNING)
    await mine.create_run(run)
    await mine.acquire_lease(run.run_id, "host:1:me", 60)
    await mine.transition(
        run.run_id, RunStatus.FAILED, release=True, events=[_ev(run.run_id, "run.failed")]
    )
    await theirs.append_events(run.run_id, [_ev(run.run_id, "retry.asked")])
    await mine.append_events(run.run_id, [_ev(run.run_id, "note")])
    assert await _seqs(theirs, run.run_id) == [(1, "run.failed"), (2, "retry.asked"), (3, "note")]


# -- the lease across status changes --------------------------------------------------------


async def test_a_status_change_keeps_the_lease_unless_it_releases_it(ledger: LedgerStore) -> None:
    run = _run()
    await ledger.create_run(run)
    held = await ledger.acquire_lease(run.run_id, "host:1:me", 60)
    running = await ledger.transition(run.run_id, RunStatus.RUNNING)
    assert (running.lease_holder, running.lease_expires_at) == ("host:1:me", held.lease_expires_at)
    with pytest.raises(LeaseHeld):
        await ledger.acquire_lease(run.run_id, "host:2:you", 60)

    done = await ledger.transition(run.run_id, RunStatus.SUCCEEDED, release=True)
    assert (done.lease_holder, done.lease_expires_at) == (None, None)
    assert await ledger.renew_lease(run.run_id, "host:1:me", 60) is None
    taken = await ledger.acquire_lease(run.run_id, "host:2:you", 60)
    assert taken.lease_holder == "host:2:you"


async def test_a_cancel_that_wins_the_ending_gives_up_the_lease_too(ledger: LedgerStore) -> None:
    run = _run(RunStatus.RUNNING)
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, "host:1:me", 60)
    await ledger.request_cancel(run.run_id)
    ended = await ledger.transition(
        run.run_id,
        RunStatus.SUCCEEDED,
        release=True,
        cancel_wins=[_ev(run.run_id, "run.cancelled")],
    )
    assert ended.status is RunStatus.CANCELLED
    assert (ended.lease_holder, ended.lease_expires_at) == (None, None)
    assert (await ledger.acquire_lease(run.run_id, "host:2:you", 60)).lease_holder == "host:2:you"


# -- who holds it, and until when -----------------------------------------------------------


async def test_a_held_lease_is_refused_naming_when_it_ends(ledger: LedgerStore) -> None:
    run = _run()
    await ledger.create_run(run)
    held = await ledger.acquire_lease(run.run_id, "host:1:me", 7200)
    assert held.lease_expires_at is not None
    until = time.strftime("%H:%M:%S", time.localtime(held.lease_expires_at))
    with pytest.raises(LeaseHeld) as info:
        await ledger.acquire_lease(run.run_id, "host:2:you", 60)
    assert f"being advanced by host:1:me (lease until {until})" in str(info.value)


async def test_a_lease_taken_from_a_dead_process_is_held_for_its_ttl(ledger: LedgerStore) -> None:
    run = _run()
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, DEAD_HOLDER, 3600)
    taken = await ledger.acquire_lease(run.run_id, "host:2:you", 3600)
    assert taken.lease_holder == "host:2:you"
    with pytest.raises(LeaseHeld, match="host:2:you"):  # not expired: nobody else takes it
        await ledger.acquire_lease(run.run_id, "host:3:them", 60)


# -- a run that is not there ----------------------------------------------------------------


async def test_every_write_to_a_missing_run_names_it(ledger: LedgerStore) -> None:
    """What `stageline cancel ID` and friends print: the id the user typed."""
    missing = f"gone-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RunNotFound, match=missing):
        await ledger.request_cancel(missing)
    with pytest.raises(RunNotFound, match=missing):
        await ledger.transition(missing, RunStatus.RUNNING)
    with pytest.raises(RunNotFound, match=missing):
        await ledger.acquire_lease(missing, "host:1:me", 60)
    with pytest.raises(RunNotFound, match=missing):
        await ledger.append_events(missing, [_ev(missing, "x")])


async def test_a_claim_takes_the_lease_and_the_status_together_or_neither(
    ledger: LedgerStore,
) -> None:
    run = _run()
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, "host:2:you", 60)
    resumed = _ev(run.run_id, "run.resumed")
    with pytest.raises(LeaseHeld):
        await ledger.transition(
            run.run_id, RunStatus.RUNNING, lease=("host:1:me", 60), events=[resumed]
        )
    left = await ledger.get_run(run.run_id)
    assert (left.status, left.lease_holder) == (RunStatus.QUEUED, "host:2:you")
    assert await _seqs(ledger, run.run_id) == []

    await ledger.release_lease(run.run_id, "host:2:you")
    claimed = await ledger.transition(
        run.run_id,
        RunStatus.RUNNING,
        expect=[RunStatus.QUEUED],
        lease=("host:1:me", 60),
        events=[_ev(run.run_id, "run.resumed")],
    )
    assert (claimed.status, claimed.lease_holder) == (RunStatus.RUNNING, "host:1:me")
    assert await _seqs(ledger, run.run_id) == [(1, "run.resumed")]
    with pytest.raises(InvalidTransition):  # the status moved on: refused, nothing changed
        await ledger.transition(
            run.run_id, RunStatus.RUNNING, expect=[RunStatus.QUEUED], lease=("host:1:me", 60)
        )
