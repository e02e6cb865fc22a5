"""The SQLite executor runs statements on the event loop's thread, but never waits there: a
statement that meets another connection's write lock waits for it on a thread of its own, with
the URL's busy timeout, while the loop goes on."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import pytest

from stageline.errors import RunNotFound, StorageError
from stageline.ledger import Run, RunStatus
from stageline.ledger._sqlite import _until_free, open_sqlite_ledger, sqlite_path

pytestmark = pytest.mark.timeout(60)

TICKS = 20
"""Loop turns another task must make while the write waits, before the lock is let go."""


def _run() -> Run:
    return Run(
        run_id=f"x-{uuid.uuid4().hex[:10]}",
        template="tpl",
        template_version="1",
        status=RunStatus.QUEUED,
    )


def _hold_write_lock(db: Path) -> sqlite3.Connection:
    """Another connection (as another process would) holding the write lock until it commits."""
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    return other


async def test_a_write_that_meets_a_held_lock_waits_off_the_loop_then_lands(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}?busy_timeout=30"
    ledger, executor = await open_sqlite_ledger(url)
    try:
        other = _hold_write_lock(sqlite_path(url))
        ticks = 0
        writing = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            await writing.wait()
            while ticks < TICKS:
                await asyncio.sleep(0)
                ticks += 1
            # Only a loop that was free while the write waited gets here: let go of the lock.
            other.execute("COMMIT")

        ticking = asyncio.create_task(ticker())
        run = _run()
        writing.set()
        created = await ledger.create_run(run)
        await ticking
        assert created == run and ticks == TICKS
        assert await ledger.get_run(run.run_id) == run
        # Back on the loop's thread, a write meeting the lock again still waits for it.
        other.execute("BEGIN IMMEDIATE")
        again = _run()
        release = asyncio.get_running_loop().call_later(0.2, other.execute, "COMMIT")
        try:
            assert await ledger.create_run(again) == again
        finally:
            release.cancel()
        other.close()
    finally:
        await executor.close()


async def test_a_lock_held_past_the_busy_timeout_is_a_storage_error_and_writes_nothing(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}?busy_timeout=0.2"
    ledger, executor = await open_sqlite_ledger(url)
    try:
        other = _hold_write_lock(sqlite_path(url))
        run = _run()
        with pytest.raises(StorageError, match="busy"):
            await ledger.create_run(run)
        other.execute("COMMIT")
        other.close()
        with pytest.raises(RunNotFound):
            await ledger.get_run(run.run_id)
        assert await ledger.create_run(run) == run  # the connection is usable afterwards
    finally:
        await executor.close()


def _busy_error() -> sqlite3.OperationalError:
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = sqlite3.SQLITE_BUSY  # type: ignore[attr-defined]
    return exc


def test_a_call_that_meets_the_lock_is_tried_again_until_it_is_free() -> None:
    """The wait for another process's write lock: short pauses, the call run again from the
    start each time, until the lock is let go (here: the third try)."""
    tries: list[int] = []

    def write() -> str:
        tries.append(1)
        if len(tries) < 3:
            raise _busy_error()
        return "written"

    assert _until_free(write, (), timeout=60) == "written"
    assert len(tries) == 3


def test_only_a_busy_error_is_tried_again_and_only_until_the_timeout() -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: t")

    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        _until_free(broken, (), timeout=60)
    assert len(calls) == 1

    def held() -> None:
        raise _busy_error()

    with pytest.raises(sqlite3.OperationalError, match="locked"):
        _until_free(held, (), timeout=0)  # the deadline has passed: the busy error stands
