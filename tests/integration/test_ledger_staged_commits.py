"""Staged ledger rows and the commits that carry them, on the SQL ledgers (SQLite, Postgres):
rows staged for runs this process leases ride the checkpoint's commit; a commit that fails
gives them back; rows for other runs are still flushed on their own."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import Backend, Event, Run, RunStatus, open_backend
from stageline.ledger._sql import SqlLedger


@pytest.fixture
async def ledger(shared_backend_url: str) -> AsyncIterator[SqlLedger]:
    opened: Backend = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        assert isinstance(opened.ledger, SqlLedger)
        yield opened.ledger
    finally:
        await opened.aclose()


async def _new_run(ledger: SqlLedger, status: RunStatus) -> str:
    """A run in ``status``; a running one leased by this process, as the runner leaves it."""
    run = Run(
        run_id=f"s-{uuid.uuid4().hex[:10]}",
        template="tpl",
        template_version="1",
        status=status,
    )
    await ledger.create_run(run)
    if status is RunStatus.RUNNING:
        await ledger.acquire_lease(run.run_id, "host:1:me", 3600)
    return run.run_id


async def _leased_run(ledger: SqlLedger) -> str:
    return await _new_run(ledger, RunStatus.RUNNING)


async def _queued_run(ledger: SqlLedger) -> str:
    return await _new_run(ledger, RunStatus.QUEUED)


async def _kinds_once_written(ledger: SqlLedger, run_id: str) -> list[str]:
    """The run's event kinds once there are any (bounded: the flush is on a timer)."""

    async def written() -> list[str]:
        while not (found := await ledger.events(run_id)):
            await asyncio.sleep(0.02)
        return [e.kind for e in found]

    return await asyncio.wait_for(written(), 30)


async def test_one_commit_numbers_and_publishes_the_events_of_every_leased_run(
    ledger: SqlLedger,
) -> None:
    published: list[Event] = []
    ledger.publisher = published.extend
    one, two = await _leased_run(ledger), await _leased_run(ledger)
    ledger.stage_event(Event(run_id=one, kind="a"))
    ledger.stage_event(Event(run_id=two, kind="b"))
    ledger.stage_event(Event(run_id=one, kind="c"))
    await ledger.commit_with_staged([])
    assert sorted((e.run_id, e.seq, e.kind) for e in published) == sorted(
        [(one, 1, "a"), (one, 2, "c"), (two, 1, "b")]
    )
    assert [e.kind for e in await ledger.events(one)] == ["a", "c"]
    assert [e.kind for e in await ledger.events(two)] == ["b"]


async def test_a_failed_commit_gives_the_staged_rows_back(ledger: SqlLedger) -> None:
    """The checkpoint's commit fails (here: a statement the database refuses): nothing of it
    is written, and the staged events go with the next commit, numbered as before."""
    run_id = await _leased_run(ledger)
    ledger.stage_event(Event(run_id=run_id, kind="a"))
    with pytest.raises(Exception, match="no_such_table"):  # the driver's error, as it is
        await ledger.commit_with_staged([("INSERT INTO no_such_table VALUES (1)", [{}])])
    assert await ledger.events(run_id) == []
    ledger.stage_event(Event(run_id=run_id, kind="b"))
    await ledger.flush()
    assert [(e.seq, e.kind) for e in await ledger.events(run_id)] == [(1, "a"), (2, "b")]


async def test_an_event_staged_alone_is_flushed_on_its_own(ledger: SqlLedger) -> None:
    """No checkpoint comes (a slow node): the staged event is committed after a short delay."""
    run_id = await _leased_run(ledger)
    ledger.stage_event(Event(run_id=run_id, kind="node.started"))
    assert await _kinds_once_written(ledger, run_id) == ["node.started"]


async def test_rows_of_runs_leased_elsewhere_are_still_flushed_after_a_commit(
    ledger: SqlLedger,
) -> None:
    """A checkpoint commit takes this process's runs' rows; another run's staged event (one
    this process holds no lease of) stays on the flush timer and is written by it."""
    mine, other = await _leased_run(ledger), await _queued_run(ledger)
    ledger.stage_event(Event(run_id=mine, kind="mine"))
    ledger.stage_event(Event(run_id=other, kind="other"))
    await ledger.commit_with_staged([])
    assert [e.kind for e in await ledger.events(mine)] == ["mine"]
    assert await _kinds_once_written(ledger, other) == ["other"]


_INSERT_KEY = text("INSERT INTO group_rows (k) VALUES (:k)")


async def _scratch_table(ledger: SqlLedger) -> str:
    """A table of keys for the tests' own rows (each test has a database of its own)."""
    async with ledger.lock:
        await ledger._x.execute("CREATE TABLE group_rows (k VARCHAR(20) PRIMARY KEY)", {})
        await ledger._x.commit()
    return ledger._sql(_INSERT_KEY)


async def _keys(ledger: SqlLedger) -> list[str]:
    async with ledger.lock:
        rows = await ledger._x.fetch("SELECT k FROM group_rows ORDER BY k", {})
    return [row["k"] for row in rows]


def _count_commits(ledger: SqlLedger) -> list[int]:
    """Counts the checkpoint transactions the ledger sends from now on."""
    counted = [0]
    write_and_commit = ledger._x.write_and_commit

    async def counting(*args: object, **kwargs: object) -> list[str]:
        counted[0] += 1
        return await write_and_commit(*args, **kwargs)  # type: ignore[arg-type]

    ledger._x.write_and_commit = counting  # type: ignore[method-assign]
    return counted


async def _queued_behind_the_connection(ledger: SqlLedger, *calls: object) -> list[object]:
    """Start the commits while another holds the connection, then let it go: their outcomes."""
    async with ledger.lock:
        tasks = [asyncio.ensure_future(c) for c in calls]  # type: ignore[call-overload]
        await asyncio.sleep(0.05)  # each has queued its rows and waits for the connection
        assert not any(t.done() for t in tasks)
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_checkpoints_queued_behind_a_commit_ride_one_commit_together(
    ledger: SqlLedger,
) -> None:
    """Group commit: three checkpoints that queued while the connection was busy are committed
    in one transaction, with the staged rows, and none returns before it."""
    insert = await _scratch_table(ledger)
    run_id = await _leased_run(ledger)
    ledger.stage_event(Event(run_id=run_id, kind="staged"))
    commits = _count_commits(ledger)
    outcomes = await _queued_behind_the_connection(
        ledger, *(ledger.commit_with_staged([(insert, [{"k": k}])]) for k in "abc")
    )
    assert outcomes == [None, None, None]
    assert commits == [1]
    assert await _keys(ledger) == ["a", "b", "c"]
    assert [e.kind for e in await ledger.events(run_id)] == ["staged"]


async def test_one_bad_checkpoint_in_a_group_fails_alone(ledger: SqlLedger) -> None:
    """A group whose transaction fails gives its members back: each commits alone, so the bad
    one gets its own error and the others are written (the staged rows too)."""
    insert = await _scratch_table(ledger)
    run_id = await _leased_run(ledger)
    ledger.stage_event(Event(run_id=run_id, kind="staged"))
    outcomes = await _queued_behind_the_connection(
        ledger,
        ledger.commit_with_staged([(insert, [{"k": "a"}])]),
        ledger.commit_with_staged([("INSERT INTO no_such_table VALUES (1)", [{}])]),
        ledger.commit_with_staged([(insert, [{"k": "c"}])]),
    )
    assert outcomes[0] is None and outcomes[2] is None
    assert "no_such_table" in str(outcomes[1])
    assert await _keys(ledger) == ["a", "c"]
    assert [e.kind for e in await ledger.events(run_id)] == ["staged"]
