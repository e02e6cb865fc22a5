"""The outbox part of the ledger on every backend, the in-memory double included: a sink's
start, claims only one holder wins, acknowledgements that move the cursor, failed batches
that back off and come back the same."""

from __future__ import annotations

import time
import uuid

import pytest

from stageline.ledger import Backend, Claim, Event, LedgerStore, Run, RunStatus


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def _run(ledger: LedgerStore, n: int, *, ts: float | None = None) -> str:
    run_id = f"ob-{uuid.uuid4().hex[:10]}"
    await ledger.create_run(
        Run(run_id=run_id, template="t", template_version="1+x", status=RunStatus.RUNNING)
    )
    kw = {"ts": ts} if ts is not None else {}
    await ledger.append_events(run_id, [Event(run_id=run_id, kind=f"k{i}", **kw) for i in range(n)])
    return run_id


async def test_a_sink_starts_once_and_gets_what_was_written_since(ledger: LedgerStore) -> None:
    sink = f"s-{uuid.uuid4().hex[:6]}"
    old = await _run(ledger, 3, ts=time.time() - 60)
    start = await ledger.sink_start(sink)
    assert await ledger.sink_start(sink, now=start.started_at + 99) == start  # first one stays
    new = await _run(ledger, 2)
    due = await ledger.due_runs(sink, since=start.watermark)
    assert new in due and old not in due
    claim = await ledger.claim_events(
        sink, new, holder="a", until=time.time() + 30, started_at=start.started_at, limit=10
    )
    assert isinstance(claim, Claim) and [e.seq for e in claim.events] == [1, 2]


async def test_one_holder_wins_a_claim_and_only_it_acknowledges(ledger: LedgerStore) -> None:
    sink, run_id = f"s-{uuid.uuid4().hex[:6]}", await _run(ledger, 5)
    until = time.time() + 30
    first = await ledger.claim_events(
        sink, run_id, holder="a", until=until, started_at=0.0, limit=3
    )
    assert isinstance(first, Claim) and [e.seq for e in first.events] == [1, 2, 3]
    assert (
        await ledger.claim_events(sink, run_id, holder="b", until=until, started_at=0.0, limit=3)
        == "a"
    )
    assert not await ledger.ack_events(sink, run_id, holder="b", seq=3)
    assert await ledger.ack_events(sink, run_id, holder="a", seq=3)
    assert await ledger.sink_cursor(sink, run_id) == 3
    nxt = await ledger.claim_events(sink, run_id, holder="b", until=until, started_at=0.0, limit=3)
    assert isinstance(nxt, Claim) and [e.seq for e in nxt.events] == [4, 5]
    stolen = await ledger.claim_events(
        sink, run_id, holder="c", until=until, started_at=0.0, limit=3, steal="b"
    )  # b is known to be dead
    assert isinstance(stolen, Claim) and stolen.after == 3
    assert await ledger.ack_events(sink, run_id, holder="c", seq=5)
    assert run_id not in await ledger.due_runs(sink, since=0.0)


async def test_a_failed_batch_backs_off_and_comes_back_the_same(ledger: LedgerStore) -> None:
    sink, run_id = f"s-{uuid.uuid4().hex[:6]}", await _run(ledger, 4)
    now = time.time()
    claim = await ledger.claim_events(
        sink, run_id, holder="a", until=now + 30, started_at=0.0, limit=2
    )
    assert isinstance(claim, Claim)
    await ledger.release_events(sink, run_id, holder="a", retry_at=now + 60, failed_upto=2)
    assert run_id not in await ledger.due_runs(sink, since=0.0, now=now)
    assert (
        await ledger.claim_events(
            sink, run_id, holder="a", until=now + 30, started_at=0.0, limit=4, now=now
        )
        is None
    )  # backing off
    later = now + 61
    assert run_id in await ledger.due_runs(sink, since=0.0, now=later)
    again = await ledger.claim_events(
        sink, run_id, holder="b", until=later + 30, started_at=0.0, limit=4, now=later
    )
    assert isinstance(again, Claim) and [e.seq for e in again.events] == [1, 2]  # same batch
    assert again.attempts == 1
    assert await ledger.ack_events(sink, run_id, holder="b", seq=2)
    fresh = await ledger.claim_events(
        sink, run_id, holder="b", until=later + 30, started_at=0.0, limit=4, now=later
    )
    assert isinstance(fresh, Claim) and [e.seq for e in fresh.events] == [3, 4]
    assert fresh.attempts == 0


async def test_the_watermark_trails_the_oldest_unacknowledged_event(
    ledger: LedgerStore,
) -> None:
    sink = f"s-{uuid.uuid4().hex[:6]}"
    start = await ledger.sink_start(sink, now=time.time() - 3600)
    run_id = await _run(ledger, 2, ts=time.time() - 1800)
    mark = await ledger.advance_watermark(sink, since=start.watermark)
    assert start.watermark < mark <= time.time() - 1800  # not past the unsent events
    claim = await ledger.claim_events(
        sink, run_id, holder="a", until=time.time() + 30, started_at=start.started_at, limit=5
    )
    assert isinstance(claim, Claim) and len(claim.events) == 2
    assert await ledger.ack_events(sink, run_id, holder="a", seq=2)
    moved = await ledger.advance_watermark(sink, since=mark)
    assert moved > time.time() - 400  # all sent: up to the lag behind now
    assert run_id not in await ledger.due_runs(sink, since=moved)


async def test_deleting_a_run_forgets_its_cursors(ledger: LedgerStore) -> None:
    sink, run_id = f"s-{uuid.uuid4().hex[:6]}", await _run(ledger, 1)
    await ledger.claim_events(
        sink, run_id, holder="a", until=time.time() + 30, started_at=0.0, limit=1
    )
    assert await ledger.ack_events(sink, run_id, holder="a", seq=1)
    await ledger.delete_run(run_id)
    assert await ledger.sink_cursor(sink, run_id) is None
