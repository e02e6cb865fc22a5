"""The SQLite backend: ledger and LangGraph checkpoints on one connection to one file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiosqlite
from sqlalchemy.dialects import sqlite

from stageline.errors import StorageError
from stageline.ledger._sql import SqlLedger

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

__all__ = ["open_sqlite", "open_sqlite_ledger"]

BUSY_TIMEOUT_MS = 10_000


class _SqliteExecutor:
    dialect = sqlite.dialect(paramstyle="named")

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    # Each call is one hop to aiosqlite's thread; cursors are left to the garbage collector
    # rather than closed with a second hop.

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        cur = await self.conn.execute(sql, dict(params))
        cols = [d[0] for d in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in await cur.fetchall()]

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        cur = await self.conn.execute(sql, dict(params))
        return cur.rowcount

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self.conn.executemany(sql, [dict(p) for p in params])

    async def execute_batch(self, ops: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
        if ops:
            # One hop: aiosqlite's own worker-thread call, as its public methods use it.
            await self.conn._execute(_run_batch, self.conn._conn, ops)

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()


Ops = Sequence[tuple[str, Sequence[Mapping[str, Any]]]]


def _run_batch(raw: sqlite3.Connection, ops: Ops) -> None:
    for sql, rows in ops:
        raw.executemany(sql, rows)


def _run_batch_and_commit(
    raw: sqlite3.Connection, ops: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]
) -> None:
    _run_batch(raw, ops)
    raw.commit()


class _CheckpointConnection:
    """The aiosqlite connection as LangGraph's saver sees it: ``commit()`` first writes the
    ledger's staged rows, in the same transaction and the same hop to the worker thread.

    So a step costs no extra commit or round trip, and a node's record is durable exactly when
    the checkpoint write that marks the node done is.
    """

    def __init__(self, conn: aiosqlite.Connection, ledger: SqlLedger) -> None:
        self._real = conn
        self._ledger = ledger

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def commit(self) -> None:
        ops, written, undo = self._ledger.take_staged()
        if not ops:
            await self._real.commit()
            return
        try:
            await self._real._execute(_run_batch_and_commit, self._real._conn, ops)
        except BaseException:
            undo()
            raise
        self._ledger._publish(written)


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///PATH`` URL (four slashes for an absolute path)."""
    rest = url.split("://", 1)[1]
    return Path(rest[1:])


async def open_sqlite_ledger(url: str) -> tuple[SqlLedger, aiosqlite.Connection]:
    """Open (creating if needed) the SQLite file and migrate the ledger; LangGraph untouched."""
    path = sqlite_path(url)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open the SQLite database {path}: {exc}") from exc
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        ledger = SqlLedger(_SqliteExecutor(conn), lock=asyncio.Lock(), upsert=sqlite.insert,
                           url=url)
        await ledger.setup()
    except sqlite3.Error as exc:
        await conn.close()
        raise StorageError(f"cannot set up the SQLite database {path}: {exc}") from exc
    return ledger, conn


async def open_sqlite(url: str, serde: SerializerProtocol) -> tuple[SqlLedger, AsyncSqliteSaver]:
    """Open (creating if needed) the SQLite file, migrate it, and set up LangGraph's tables."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    ledger, conn = await open_sqlite_ledger(url)
    try:
        saver = AsyncSqliteSaver(_CheckpointConnection(conn, ledger), serde=serde)  # type: ignore[arg-type]
        saver.lock = ledger.lock  # one statement stream on the shared connection
        await saver.setup()
    except sqlite3.Error as exc:
        await conn.close()
        raise StorageError(
            f"cannot set up the SQLite database {sqlite_path(url)}: {exc}") from exc
    return ledger, saver
