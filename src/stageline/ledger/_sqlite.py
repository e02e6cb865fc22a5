"""The SQLite backend: ledger and LangGraph checkpoints on one connection to one file.

``sqlite:///PATH?busy_timeout=SECONDS`` sets how long a statement waits for another process's
write lock (default 10) before it fails with a ``StorageError`` saying the database is busy.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl

import aiosqlite
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect

from stageline.errors import ConfigError, StorageError
from stageline.ledger._schema import MIGRATIONS
from stageline.ledger._sql import SqlLedger

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

__all__ = ["open_sqlite", "open_sqlite_ledger", "sqlite_path", "storage_error"]

BUSY_TIMEOUT_MS = 10_000
"""Default wait for another process's write lock (``?busy_timeout=`` in the URL overrides)."""

_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_T = TypeVar("_T")


def storage_error(path: Path, exc: sqlite3.Error) -> StorageError:
    """A driver error as the ``StorageError`` a user can act on; a busy database says so."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in _BUSY or "locked" in str(exc):
        return StorageError(
            f"the SQLite database {path} is busy: another process holds its write lock "
            f"({exc}); try again when it is done, or stop the process that holds it "
            f"(`fuser {path}` names it)"
        )
    return StorageError(f"the SQLite database {path} failed: {exc}")


class _SqliteExecutor:
    dialect: Dialect = sqlite.dialect(paramstyle="named")

    def __init__(self, conn: aiosqlite.Connection, path: Path) -> None:
        self.conn = conn
        self.path = path

    async def _guard(self, call: Awaitable[_T]) -> _T:
        try:
            return await call
        except sqlite3.OperationalError as exc:
            raise storage_error(self.path, exc) from exc

    # Each call is one hop to aiosqlite's thread; cursors are left to the garbage collector
    # rather than closed with a second hop.

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return await self._guard(self._fetch(sql, params))

    async def _fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        cur = await self.conn.execute(sql, dict(params))
        cols = [d[0] for d in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in await cur.fetchall()]

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        cur = await self._guard(self.conn.execute(sql, dict(params)))
        return cur.rowcount

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self._guard(self.conn.executemany(sql, [dict(p) for p in params]))

    async def execute_batch(self, ops: Sequence[tuple[str, Sequence[Mapping[str, Any]]]]) -> None:
        if ops:
            # One hop: aiosqlite's own worker-thread call, as its public methods use it.
            await self._guard(self.conn._execute(_run_batch, self.conn._conn, ops))  # type: ignore[no-untyped-call]

    async def commit(self) -> None:
        await self._guard(self.conn.commit())

    async def rollback(self) -> None:
        await self.conn.rollback()


class SqliteLedger(SqlLedger):
    """The SQL ledger on SQLite: migrations check-and-apply under ``BEGIN IMMEDIATE``."""

    async def _lock_schema(self, x: Any) -> None:
        await x.execute("BEGIN IMMEDIATE", {})

    async def setup(self) -> None:
        # A database already up to date is only read: no write lock for every process's start.
        async with self._read() as x:
            found = await x.fetch(_HAS_VERSION_TABLE, {})
            if found:
                rows = await x.fetch("SELECT max(version) AS v FROM stageline_schema_version", {})
                if int(rows[0]["v"] or 0) >= len(MIGRATIONS):
                    return
        await super().setup()


Ops = Sequence[tuple[str, Sequence[Mapping[str, Any]]]]


def _run_batch(raw: sqlite3.Connection, ops: Ops) -> None:
    for sql, rows in ops:
        raw.executemany(sql, rows)


def _run_batch_and_commit(
    raw: sqlite3.Connection, ops: Ops, check: tuple[str, list[str]] | None
) -> list[str]:
    """Staged rows, the commit, then the watched runs' cancel flags: the runs flagged."""
    _run_batch(raw, ops)
    raw.commit()
    if check is None:
        return []
    sql, run_ids = check
    return [r for r in run_ids if (raw.execute(sql, {"run_id": r}).fetchone() or (0,))[0]]


class _CheckpointConnection:
    """The aiosqlite connection as LangGraph's saver sees it: ``commit()`` first writes the
    ledger's staged rows, in the same transaction and the same hop to the worker thread.

    So a step costs no extra commit or round trip, and a node's record is durable exactly when
    the checkpoint write that marks the node done is.
    """

    def __init__(self, conn: aiosqlite.Connection, ledger: SqlLedger, path: Path) -> None:
        self._real = conn
        self._ledger = ledger
        self._ledger_path = path

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def commit(self) -> None:
        ops, written, undo = self._ledger.take_staged()
        check = self._ledger.cancel_check()
        if not ops and check is None:
            await self._real.commit()
            return
        try:
            flagged = await self._real._execute(  # type: ignore[no-untyped-call]
                _run_batch_and_commit, self._real._conn, ops, check
            )
        except sqlite3.OperationalError as exc:
            undo()
            raise storage_error(self._ledger_path, exc) from exc
        except BaseException:
            undo()
            raise
        self._ledger._publish(written)
        self._ledger.cancels_seen(flagged)


_HAS_VERSION_TABLE = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stageline_schema_version'"
)


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///PATH`` URL (four slashes for an absolute path)."""
    rest = url.split("://", 1)[1].partition("?")[0]
    return Path(rest[1:])


def busy_timeout_ms(url: str) -> int:
    """The URL's ``busy_timeout`` (seconds) in milliseconds, or the default."""
    query = dict(parse_qsl(url.partition("?")[2]))
    raw = query.get("busy_timeout")
    if raw is None:
        return BUSY_TIMEOUT_MS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= 3600:
        raise ConfigError(f"busy_timeout={raw!r} in the database URL; give seconds, 0 to 3600")
    return int(seconds * 1000)


async def open_sqlite_ledger(url: str) -> tuple[SqlLedger, aiosqlite.Connection]:
    """Open (creating if needed) the SQLite file and migrate the ledger; LangGraph untouched."""
    path = sqlite_path(url)
    timeout_ms = busy_timeout_ms(url)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = await aiosqlite.connect(str(path), timeout=timeout_ms / 1000)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open the SQLite database {path}: {exc}") from exc
    try:
        await conn.execute(f"PRAGMA busy_timeout={timeout_ms}")
        await conn.execute("PRAGMA journal_mode=WAL")
        executor = _SqliteExecutor(conn, path)
        ledger = SqliteLedger(executor, lock=asyncio.Lock(), upsert=sqlite.insert, url=url)
        await ledger.setup()
    except (sqlite3.Error, StorageError) as exc:
        await conn.close()
        if isinstance(exc, StorageError):
            raise
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise storage_error(path, exc) from exc
        raise StorageError(f"cannot set up the SQLite database {path}: {exc}") from exc
    return ledger, conn


async def open_sqlite(url: str, serde: SerializerProtocol) -> tuple[SqlLedger, AsyncSqliteSaver]:
    """Open (creating if needed) the SQLite file, migrate it, and set up LangGraph's tables."""
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    ledger, conn = await open_sqlite_ledger(url)
    try:
        saver = AsyncSqliteSaver(_CheckpointConnection(conn, ledger, sqlite_path(url)), serde=serde)  # type: ignore[arg-type]
        saver.lock = ledger.lock  # one statement stream on the shared connection
        await saver.setup()
    except sqlite3.Error as exc:
        await conn.close()
        if isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
            raise storage_error(sqlite_path(url), exc) from exc
        raise StorageError(f"cannot set up the SQLite database {sqlite_path(url)}: {exc}") from exc
    return ledger, saver
