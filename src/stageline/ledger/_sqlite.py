"""The SQLite backend: ledger and LangGraph checkpoints on one connection to one file."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiosqlite
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from sqlalchemy.dialects import sqlite

from stageline.errors import StorageError
from stageline.ledger._sql import SqlLedger

__all__ = ["LedgerSqliteSaver", "open_sqlite"]

BUSY_TIMEOUT_MS = 10_000


class _SqliteExecutor:
    dialect = sqlite.dialect(paramstyle="named")

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        async with self.conn.execute(sql, dict(params)) as cur:
            cols = [d[0] for d in cur.description or ()]
            rows = await cur.fetchall()
        return [dict(zip(cols, row, strict=True)) for row in rows]

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        async with self.conn.execute(sql, dict(params)) as cur:
            return cur.rowcount

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self.conn.executemany(sql, [dict(p) for p in params])

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()


class LedgerSqliteSaver(AsyncSqliteSaver):
    """LangGraph's SQLite saver, writing the ledger's staged rows in its own transactions."""

    def __init__(self, conn: aiosqlite.Connection, *, serde: SerializerProtocol, ledger: SqlLedger):
        super().__init__(conn, serde=serde)
        self.ledger = ledger

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        async with self.ledger.gate:
            written = await self.ledger.write_staged_before_checkpoint()
            result = await super().aput(config, checkpoint, metadata, new_versions)
        self.ledger._publish(written)
        return result

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        async with self.ledger.gate:
            written = await self.ledger.write_staged_before_checkpoint()
            await super().aput_writes(config, writes, task_id, task_path)
        self.ledger._publish(written)


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///PATH`` URL (four slashes for an absolute path)."""
    rest = url.split("://", 1)[1]
    return Path(rest[1:] if rest.startswith("/") and not rest.startswith("//") else rest[1:])


async def open_sqlite(url: str, serde: SerializerProtocol) -> tuple[SqlLedger, LedgerSqliteSaver]:
    """Open (creating if needed) the SQLite file, migrate it, and set up LangGraph's tables."""
    path = sqlite_path(url)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), timeout=BUSY_TIMEOUT_MS / 1000)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open the SQLite database {path}: {exc}") from exc
    try:
        await conn.execute("PRAGMA journal_mode=WAL")
        await conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        lock = asyncio.Lock()
        ledger = SqlLedger(_SqliteExecutor(conn), lock=lock, upsert=sqlite.insert, url=url)
        saver = LedgerSqliteSaver(conn, serde=serde, ledger=ledger)
        saver.lock = lock  # one statement stream on the shared connection
        await ledger.setup()
        await saver.setup()
    except sqlite3.Error as exc:
        await conn.close()
        raise StorageError(f"cannot set up the SQLite database {path}: {exc}") from exc
    return ledger, saver
