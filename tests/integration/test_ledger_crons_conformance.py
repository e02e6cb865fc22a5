"""Schedules on every ledger backend: kept, found, changed, deleted; a due time claimed once."""

from __future__ import annotations

import asyncio

import pytest

from stageline.errors import InputError
from stageline.ledger import Backend, Cron, LedgerStore, next_due

T0 = 1_800_000_000.0  # a Friday, 15 Jan 2027 08:00 UTC


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def test_schedules_are_kept_found_changed_and_deleted(ledger: LedgerStore) -> None:
    a = await ledger.put_cron(
        Cron(assistant_id="blog_post", schedule="*/5 * * * *", metadata={"team": "docs"}), now=T0
    )
    b = await ledger.put_cron(
        Cron(assistant_id="sdlc", schedule="0 9 * * *", thread_id="th-1", timezone="Europe/Paris"),
        now=T0 + 1,
    )
    assert a.next_run_at == next_due("*/5 * * * *", None, T0) and a.next_run_at > T0
    assert b.next_run_at == next_due("0 9 * * *", "Europe/Paris", T0 + 1)
    assert await ledger.cron(a.cron_id) == a
    assert [c.cron_id for c in await ledger.crons()] == [a.cron_id, b.cron_id]
    assert [c.cron_id for c in await ledger.crons(assistant_id="sdlc")] == [b.cron_id]
    assert [c.cron_id for c in await ledger.crons(thread_id="th-1")] == [b.cron_id]
    assert [c.cron_id for c in await ledger.crons(metadata={"team": "docs"})] == [a.cron_id]
    assert await ledger.crons(metadata={"team": "ops"}) == []

    off = await ledger.update_cron(a.cron_id, {"enabled": False}, now=T0 + 2)
    assert off is not None and not off.enabled and off.next_run_at is None
    assert [c.cron_id for c in await ledger.crons(enabled=True)] == [b.cron_id]
    hourly = await ledger.update_cron(a.cron_id, {"enabled": True, "schedule": "0 * * * *"})
    assert hourly is not None and hourly.schedule == "0 * * * *" and hourly.next_run_at
    with pytest.raises(InputError, match="not a cron expression"):
        await ledger.update_cron(a.cron_id, {"schedule": "every day"})
    assert (await ledger.cron(a.cron_id)) == hourly  # a refused change leaves it as it was
    assert await ledger.update_cron("nope", {"enabled": False}) is None

    assert await ledger.delete_cron(a.cron_id)
    assert not await ledger.delete_cron(a.cron_id)
    assert await ledger.cron(a.cron_id) is None
    with pytest.raises(InputError, match="time zone"):
        await ledger.put_cron(Cron(assistant_id="x", schedule="* * * * *", timezone="Mars/Base"))


async def test_a_due_time_is_claimed_once_and_names_its_run(ledger: LedgerStore) -> None:
    cron = await ledger.put_cron(Cron(assistant_id="blog_post", schedule="* * * * *"), now=T0)
    due = cron.next_run_at
    assert due is not None
    assert await ledger.due_crons(due - 1) == []
    [found] = await ledger.due_crons(due)
    later = due + 60
    claims = await asyncio.gather(
        *(ledger.claim_fire(found, run_id=f"run-{i}", next_run_at=later, now=due) for i in range(5))
    )
    assert claims.count(True) == 1
    winner = f"run-{claims.index(True)}"
    assert await ledger.fired_by(winner) == cron.cron_id
    assert await ledger.fired_by("run-x") is None
    [fire] = await ledger.cron_fires(cron.cron_id)
    assert fire["run_id"] == winner and fire["due_at"] == due
    moved = await ledger.cron(cron.cron_id)
    assert moved is not None and moved.next_run_at == later
    assert await ledger.due_crons(due) == []
    # A schedule read before the move cannot fire its old due time again.
    assert not await ledger.claim_fire(found, run_id="late", next_run_at=later + 60, now=due)
    assert await ledger.delete_cron(cron.cron_id)
    assert await ledger.fired_by(winner) == cron.cron_id  # the lineage outlives the schedule
