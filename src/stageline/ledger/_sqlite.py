"""The SQLite backend: ledger and checkpoints on one connection to one file, on the loop.

``sqlite:///PATH?busy_timeout=SECONDS`` sets how long a statement waits for another process's
write lock (default 10) before it fails with a ``StorageError`` saying the database is busy.
``?synchronous=normal`` (``sqlite_synchronous`` in stageline.toml) lets a commit return before
the WAL reaches the disk: commits survive a killed process, not a power loss or OS crash; the
default, ``full``, syncs every commit. ``memory://`` is the same ledger on a database in memory
(``MemoryLedger``).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import sqlite3
import time
import weakref
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import parse_qsl

from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect

from stageline.errors import ConfigError, StorageError
from stageline.ledger._executor import Check, Op
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._sql import SqlLedger
from stageline.ledger._sqlite_read import sqlite_path

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from stageline.ledger._saver import StagelineSaver

__all__ = [
    "MemoryLedger",
    "commit_off_the_loop",
    "open_memory",
    "open_sqlite",
    "open_sqlite_ledger",
    "sqlite_path",
    "storage_error",
]

BUSY_TIMEOUT_MS = 10_000
"""Default wait for another process's write lock (``?busy_timeout=`` in the URL overrides)."""

_BUSY = (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
_COMMITS = {"off_the_loop": False}
"""Where connections opened from now on commit (``commit_off_the_loop``)."""


def commit_off_the_loop() -> None:
    """Have the SQLite connections this process opens from now on commit on their own thread,
    not on the event loop's: while the disk syncs a commit, the loop goes on serving other
    requests (the ledger's other calls wait for the commit, in order). A server with many
    clients gains that (about 1.5x round trips per second at 8 to 32 SDK clients); a lone run
    pays a thread hop (about 0.1 ms) per commit, so the CLI and workers keep commits on the
    loop."""
    _COMMITS["off_the_loop"] = True


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
    """One ``sqlite3`` connection. A call runs on the event loop's own thread when it cannot
    wait for anything: the connection's busy timeout is 0 there, so a statement that would wait
    for another process's write lock fails at once, and then runs again on a thread of its own,
    tried until the lock is free for up to the URL's ``busy_timeout`` (``_until_free``).
    Statements that take long by nature (``VACUUM``, a WAL checkpoint, which waits for readers)
    always run on that thread, with SQLite's own busy timeout, and so does every call made while
    one is there (in order, behind it).

    A hop to a thread costs about 0.1 ms here, more than a small statement: a step's commit on
    the loop's thread is what brings a node's cost near LangGraph's own loop (issue 15). While
    the disk syncs a ``synchronous=full`` commit the loop waits, as a sync saver's caller does
    (a server has its commits made on the thread instead: ``commit_off_the_loop``).
    """

    dialect: Dialect = sqlite.dialect(paramstyle="named")

    def __init__(self, conn: sqlite3.Connection, path: Path, busy_timeout_ms: int = 0) -> None:
        self._conn = conn
        self.path = path
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="stageline-sqlite")
        self._busy_ms = busy_timeout_ms
        self._set_ms: int | None = None
        """The busy timeout last set on the connection (``None``: not set by this executor)."""
        self._on_thread = 0
        """Calls sent to the thread and not yet done: later calls queue behind them."""
        self._commit_threaded = _COMMITS["off_the_loop"]

    def _busy_timeout(self, ms: int) -> None:
        if self._set_ms != ms:
            self._conn.execute(f"PRAGMA busy_timeout={ms}")
            self._set_ms = ms

    async def _call(
        self, fn: Callable[..., _T], *args: Any, threaded: bool = False, slow: bool = False
    ) -> _T:
        try:
            if not threaded and not slow and not self._on_thread:
                self._busy_timeout(0)
                try:
                    return fn(*args)
                except sqlite3.OperationalError as exc:
                    if not _busy(exc):
                        raise
                    # Another process holds the write lock: wait for it, off the loop.
            return await self._threaded(fn, *args, slow=slow)
        except sqlite3.OperationalError as exc:
            raise storage_error(self.path, exc) from exc

    async def _threaded(self, fn: Callable[..., _T], *args: Any, slow: bool = False) -> _T:
        def waiting() -> _T:
            if slow:  # SQLite's own wait: a WAL checkpoint's for readers is none of ours
                self._busy_timeout(self._busy_ms)
                return fn(*args)
            self._busy_timeout(0)
            return _until_free(fn, args, self._busy_ms / 1000)

        self._on_thread += 1
        try:
            return await asyncio.get_running_loop().run_in_executor(self._thread, waiting)
        finally:
            self._on_thread -= 1

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        return await self._call(_fetch, self._conn, sql, dict(params), slow=_slow(sql))

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        return await self._call(_execute, self._conn, sql, dict(params), slow=_slow(sql))

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self._call(self._conn.executemany, sql, [dict(p) for p in params])

    async def execute_batch(self, ops: Sequence[Op]) -> None:
        if ops:
            await self._call(_run_batch, self._conn, ops)

    async def write_and_commit(self, ops: Sequence[Op], check: Check | None) -> list[str]:
        return await self._call(
            _run_batch_and_commit, self._conn, ops, check, threaded=self._commit_threaded
        )

    async def commit(self) -> None:
        await self._call(self._conn.commit, threaded=self._commit_threaded)

    async def rollback(self) -> None:
        await self._call(self._conn.rollback)

    async def close(self) -> None:
        try:
            await self._call(self._conn.close)
        finally:
            self._thread.shutdown(wait=False)


PAUSES = (0.0001, 0.0002, 0.0005, 0.001, 0.002)
"""Seconds between two tries at a write lock another process holds (then every 2 ms)."""


def _until_free(fn: Callable[..., _T], args: tuple[Any, ...], timeout: float) -> _T:
    """``fn(*args)`` (run with no busy timeout of SQLite's) tried again while another process
    holds the write lock, for up to ``timeout`` seconds; then its busy error stands.

    SQLite's own busy handler sleeps 1, 2, 5, 10 ms... between tries: a process that met
    another's lock (held for one commit, under a millisecond) slept 4 ms on average under load
    while its other work queued behind it (a sixth of its time, at 8 SDK clients over two
    server processes). Short pauses take the lock soon after it is let go. A call that met the
    lock wrote nothing (a batch rolls back), so it runs again from the start."""
    deadline = time.monotonic() + timeout
    pauses = itertools.chain(PAUSES, itertools.repeat(PAUSES[-1]))
    while True:
        try:
            return fn(*args)
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(next(pauses))


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether a statement failed for want of a lock another connection holds (worth waiting)."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


_SLOW = ("VACUUM", "PRAGMA WAL_CHECKPOINT")
"""Statements that take long by nature, or wait for readers: always on the thread."""


def _slow(sql: str) -> bool:
    return sql.lstrip()[:22].upper().startswith(_SLOW)


class SqliteLedger(SqlLedger):
    """The SQL ledger on SQLite: migrations check-and-apply under ``BEGIN IMMEDIATE``."""

    _LEGACY_CHECKPOINTS = (
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN ('checkpoints', 'writes')"
    )

    _RECLAIM = ("VACUUM", "PRAGMA wal_checkpoint(TRUNCATE)")
    """Rewrite the file without its free pages, then fold the log back in: the file shrinks."""
    _SIZE = "SELECT page_count * page_size AS size FROM pragma_page_count(), pragma_page_size()"

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


def _fetch(raw: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    cur = raw.execute(sql, params)
    try:
        cols = [d[0] for d in cur.description or ()]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
    finally:
        cur.close()


def _execute(raw: sqlite3.Connection, sql: str, params: dict[str, Any]) -> int:
    cur = raw.execute(sql, params)
    try:
        return cur.rowcount
    finally:
        cur.close()


def _run_batch(raw: sqlite3.Connection, ops: Sequence[Op]) -> None:
    for sql, rows in ops:
        if rows:
            raw.executemany(sql, rows)


def _run_batch_and_commit(
    raw: sqlite3.Connection, ops: Sequence[Op], check: Check | None
) -> list[str]:
    """Rows, the watched runs' cancel flags (read in the same transaction), the commit (a
    rollback if a statement failed): the runs flagged."""
    try:
        _run_batch(raw, ops)
        flagged = []
        if check is not None:
            sql, params = check
            flagged = [row[0] for row in raw.execute(sql, params).fetchall()]
        raw.commit()
    except BaseException:
        raw.rollback()
        raise
    return flagged


_HAS_VERSION_TABLE = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'stageline_schema_version'"
)


def synchronous_level(url: str) -> str:
    """The URL's ``synchronous`` level (``FULL`` unless it says ``normal``)."""
    raw = dict(parse_qsl(url.partition("?")[2])).get("synchronous", "full")
    if raw.lower() not in ("full", "normal"):
        raise ConfigError(f"synchronous={raw!r} in the database URL; use full or normal")
    return raw.upper()


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


async def open_sqlite_ledger(url: str) -> tuple[SqlLedger, _SqliteExecutor]:
    """Open (creating if needed) the SQLite file and migrate the ledger (checkpoint tables
    included); the executor's ``close`` closes it."""
    path = sqlite_path(url)
    timeout_ms = busy_timeout_ms(url)
    synchronous = synchronous_level(url)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(str(path), timeout=timeout_ms / 1000, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise StorageError(f"cannot open the SQLite database {path}: {exc}") from exc
    executor = _SqliteExecutor(conn, path, timeout_ms)
    try:
        await executor.fetch("PRAGMA journal_mode=WAL", {})
        await executor.execute(f"PRAGMA synchronous={synchronous}", {})
        ledger = SqliteLedger(executor, lock=asyncio.Lock(), upsert=sqlite.insert, url=url)
        await ledger.setup()
    except (sqlite3.Error, StorageError) as exc:
        await executor.close()
        if isinstance(exc, StorageError):
            raise
        raise StorageError(f"cannot set up the SQLite database {path}: {exc}") from exc
    return ledger, executor


async def open_sqlite(
    url: str, serde: SerializerProtocol
) -> tuple[SqlLedger, StagelineSaver, Callable[[], Awaitable[None]]]:
    """Open (creating if needed) the SQLite file, migrate it, and put the saver on it."""
    from stageline.ledger._saver import StagelineSaver

    ledger, executor = await open_sqlite_ledger(url)
    return ledger, StagelineSaver(ledger, serde=serde), executor.close


class MemoryLedger(SqliteLedger):
    """The SQL ledger on a SQLite database in memory: the test double, and ``--ephemeral`` runs.

    The same code as on a file. A ``:memory:`` database exists per connection, so this ledger
    keeps its one connection (on its executor's thread) for its whole life, and nothing else
    can open it: nothing outlives the ledger. Ready when made (no ``await``): its schema is a
    copy of a database migrated once per process.
    """

    def __init__(self, url: str = "memory://") -> None:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.deserialize(_migrated_image())
        self._executor = _SqliteExecutor(conn, _MEMORY)
        super().__init__(self._executor, lock=asyncio.Lock(), upsert=sqlite.insert, url=url)
        weakref.finalize(self, conn.close)  # a ledger dropped without close() frees it too

    async def close(self) -> None:
        """Close the connection: the database is gone."""
        await self._executor.close()


_MEMORY = Path(":memory:")


@functools.cache
def _migrated_image() -> bytes:
    """An empty database with every migration applied by ``SqliteLedger.setup`` itself, as bytes.

    It runs on a loop of its own, on a thread of its own, since ``MemoryLedger()`` may be made
    inside a running loop or outside any.
    """
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    executor = _SqliteExecutor(conn, _MEMORY)
    try:
        ledger = SqliteLedger(executor, lock=asyncio.Lock(), upsert=sqlite.insert, url="memory://")
        with ThreadPoolExecutor(1, thread_name_prefix="stageline-migrate") as once:
            once.submit(asyncio.run, ledger.setup()).result()
        return conn.serialize()
    finally:
        executor._thread.shutdown()
        conn.close()


async def open_memory(
    serde: SerializerProtocol, url: str = "memory://"
) -> tuple[MemoryLedger, StagelineSaver, Callable[[], Awaitable[None]]]:
    """A new database in memory, with the saver on it."""
    from stageline.ledger._saver import StagelineSaver

    ledger = MemoryLedger(url)
    return ledger, StagelineSaver(ledger, serde=serde), ledger.close
