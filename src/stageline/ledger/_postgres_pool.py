"""SQL over a psycopg pool: the ledger's executor (the checkpoint saver's too), which replaces
a connection found dead (the server restarted) and retries once where nothing can have committed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.engine.interfaces import Dialect

from stageline.errors import StorageError
from stageline.ledger._executor import Check, Op
from stageline.ledger._schema import metadata
from stageline.ledger._sql import SqlLedger

__all__ = ["SETUP_LOCK", "PgExecutor", "PgLedger", "connection_lost", "raise_if_lost", "reason"]

SETUP_LOCK = 0x5354_4147_454C_494E
"""Advisory lock key ("STAGELIN") that serializes setup across processes starting at once."""

_T = TypeVar("_T")


def connection_lost(exc: BaseException) -> bool:
    """True for errors that mean the connection died (and may be replaced), not the query."""
    if not isinstance(exc, psycopg.OperationalError) or isinstance(exc, PoolTimeout):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def reason(exc: BaseException) -> str:
    """psycopg's message cut to its gist, on one line."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    first = lines[0] if lines else type(exc).__name__
    if "failed:" in first:  # 'connection to server at "h", port 1 failed: Connection refused'
        first = first.rsplit("failed:", 1)[1].strip()
    return first.removeprefix("FATAL:").strip()


class PgExecutor:
    """SQL for the ledger over the pool: a connection from a block's first statement to its end.

    ``PgLedger`` opens blocks: ``begin()`` for a transaction, ``release()`` after reads.
    """

    dialect: Dialect = psycopg_dialect()  # type: ignore[no-untyped-call]

    def __init__(self, pool: AsyncConnectionPool[Any], where: str) -> None:
        self._pool = pool
        self._where = where
        self._conn: psycopg.AsyncConnection[Any] | None = None
        self._in_tx = False
        self._queued: list[Op] = []
        """A transaction's writes not yet sent (see ``execute_batch``)."""
        self.setup_lock = False
        """Transactions begin by taking the setup lock (while the ledger migrates)."""

    def alone(self) -> PgExecutor:
        """An executor of its own over the same pool, for a block that need not queue behind
        this one's (reads: each takes a connection of its own)."""
        return PgExecutor(self._pool, self._where)

    async def begin(self) -> None:
        """Start a transaction: its BEGIN goes with its first statement, in one round trip."""
        self._in_tx = True
        if self.setup_lock:
            await self.execute("SELECT pg_advisory_xact_lock(%(key)s)", {"key": SETUP_LOCK})

    async def _call(
        self, op: Callable[[psycopg.AsyncConnection[Any]], Coroutine[Any, Any, _T]]
    ) -> _T:
        if self._conn is not None:  # mid-block: a lost connection took the block with it
            try:
                return await _to_the_end(op(self._conn))
            except psycopg.OperationalError as exc:
                raise_if_lost(exc, self._where)
                raise
        # The block's first statement: safe to retry on another connection. Each lost one is
        # discarded, and all of the pool's may have died at once (a server restart, or a
        # termination whose backends had not yet gone when the pool last checked them): one
        # try more than the pool holds reaches a new connection.
        tries = self._pool.max_size + 1
        for attempt in range(1, tries + 1):
            try:
                conn = await self._pool.getconn()
            except PoolTimeout as exc:
                raise_if_lost(exc, self._where)
                raise
            try:
                result = await _to_the_end(op(conn))
            except psycopg.OperationalError as exc:
                await self._pool.putconn(conn)
                if attempt == tries or not connection_lost(exc):
                    raise_if_lost(exc, self._where)
                    raise
                await self._pool.check()
                continue
            except BaseException:  # failed: BEGIN may have gone through
                await _to_the_end(_settle(conn))
                await self._pool.putconn(conn)
                raise
            self._conn = conn
            return result
        raise AssertionError("unreachable")

    @property
    def _begins(self) -> bool:
        """Whether the next statement is its transaction's first (it carries the BEGIN)."""
        return self._in_tx and self._conn is None

    async def _run(
        self,
        conn: psycopg.AsyncConnection[Any],
        sql: str,
        params: Mapping[str, Any],
        queued: Sequence[Op],
    ) -> psycopg.AsyncCursor[Any]:
        if not self._begins and not queued:
            return await conn.execute(sql, dict(params) or None)
        cur = conn.cursor()
        async with conn.pipeline():  # BEGIN, the writes queued and the statement: one round trip
            if self._begins:
                await conn.execute("BEGIN", prepare=False)
            await _send(conn, queued)
            await cur.execute(sql, dict(params) or None)
        return cur

    def _take_queued(self) -> list[Op]:
        queued, self._queued = self._queued, []
        return queued

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]:
        queued = self._take_queued()

        async def op(conn: psycopg.AsyncConnection[Any]) -> list[dict[str, Any]]:
            cur = await self._run(conn, sql, params, queued)
            # (``description`` would build a Column per column each time it is asked)
            returned = cur.pgresult is not None and cur.pgresult.status == ExecStatus.TUPLES_OK
            return list(await cur.fetchall()) if returned else []

        return await self._call(op)

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int:
        queued = self._take_queued()

        async def op(conn: psycopg.AsyncConnection[Any]) -> int:
            return (await self._run(conn, sql, params, queued)).rowcount

        return await self._call(op)

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None:
        await self.execute_batch([(sql, params)])

    async def execute_batch(self, ops: Sequence[Op]) -> None:
        """Writes whose results nobody reads. In a transaction they wait, and go with its next
        statement or its COMMIT (one round trip for all: a transaction's writes had one each,
        with the ledger's lock held across them); their errors are raised there."""
        if not any(rows for _, rows in ops):
            return
        if self._in_tx:
            self._queued += [(sql, rows) for sql, rows in ops if rows]
            return

        async def op(conn: psycopg.AsyncConnection[Any]) -> None:
            await _pipelined(conn, ops)

        await self._call(op)

    async def write_and_commit(self, ops: Sequence[Op], check: Check | None) -> list[str]:
        async def op(conn: psycopg.AsyncConnection[Any]) -> list[str]:
            flags: psycopg.AsyncCursor[Any] | None = None
            # One round trip for all: the pipeline's one Sync at its end. Results are read
            # after it (a fetch inside it would wait for them: a round trip more). No BEGIN or
            # COMMIT: what comes before a Sync is one transaction (implicit), committed at the
            # Sync, rolled back whole at its first error.
            async with conn.pipeline(), conn.cursor() as cur:
                await _send(conn, ops, cur)
                if check is not None:  # the watched runs' cancel flags, on a cursor of its
                    flags = conn.cursor()  # own: read in the transaction, not one of their own
                    await flags.execute(*check)
            if flags is None:
                return []
            try:
                return [row["run_id"] for row in await flags.fetchall()]
            finally:
                await flags.close()

        # A block of its own: a connection found dead before the commit is replaced and the
        # whole is sent again (nothing of it can have committed).
        try:
            return await self._call(op)
        finally:
            await self.release()

    async def commit(self) -> None:
        queued = self._take_queued()
        if queued and self._in_tx and self._conn is None:  # nothing sent yet: all in one
            self._in_tx = False
            await self.write_and_commit(queued, None)
            return
        await self._end("COMMIT", queued)

    async def rollback(self) -> None:
        self._queued = []
        await self._end("ROLLBACK")

    async def release(self) -> None:
        """End a block of reads: the connection goes back to the pool."""
        await self.rollback()

    async def _end(self, command: str, queued: Sequence[Op] = ()) -> None:
        conn, in_tx = self._conn, self._in_tx
        self._conn, self._in_tx = None, False
        if conn is None:
            return
        try:
            if command == "COMMIT" and in_tx:
                try:
                    await _to_the_end(_pipelined(conn, queued, "COMMIT"))
                except psycopg.OperationalError as exc:
                    raise_if_lost(exc, self._where)
                    raise
                except BaseException:  # a queued write failed: the transaction is void
                    await _to_the_end(_settle(conn))
                    raise
            else:
                await _to_the_end(_settle(conn))
        finally:
            await self._pool.putconn(conn)


class PgLedger(SqlLedger):
    """The SQL ledger, telling the pooled executor where its blocks begin and end."""

    _LEGACY_CHECKPOINTS = (
        "SELECT 1 FROM pg_class WHERE relnamespace = current_schema()::regnamespace "
        "AND relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes')"
    )
    _RECLAIM = tuple(f"VACUUM (ANALYZE) {t.name}" for t in metadata.sorted_tables)
    """A plain VACUUM of every ledger table: the space of deleted rows is reused by new ones at
    once (autovacuum would, later); the files do not shrink (``VACUUM FULL`` would, but it
    locks each table while it rewrites it: run it yourself at a quiet hour)."""
    _SIZE = "SELECT pg_database_size(current_database()) AS size"

    @property
    def _pg(self) -> PgExecutor:
        return self._x  # type: ignore[return-value]

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Any]:
        async with super()._tx() as x:
            await self._pg.begin()
            yield x

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Any]:
        """Reads do not wait for this process's writes (the ledger's lock): each block of reads
        takes a connection of its own from the pool, its statements autocommitted, as another
        process's reads are. Held behind the lock, a server's reads queued behind every commit
        of every run it advanced (at 8 clients over 2 processes each process's lock was held
        81% of the time, with 2-4 callers waiting at it)."""
        x = self._pg.alone()
        try:
            yield x
        finally:
            await x.release()

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[Any]:
        """One statement, committed by itself (no BEGIN, no COMMIT: one round trip where a
        transaction took two), on a connection of its own: nothing here waits for the lock."""
        async with self._read() as x:
            yield x

    async def setup(self) -> None:
        # Processes starting at once migrate one after the other, each in one transaction.
        self._pg.setup_lock = True
        try:
            await super().setup()
        finally:
            self._pg.setup_lock = False


async def _to_the_end(step: Coroutine[Any, Any, _T]) -> _T:
    """Run a round trip to its end even if the caller is cancelled meanwhile; a cancellation
    is raised after it (in place of its result or error).

    psycopg cut mid-call can leave a connection unfit for the next user: cancelled while it
    enters pipeline mode, it stays in it, and the next block's COMMIT is queued and never sent
    (the pool then closes the connection, rolling back a block its caller saw succeed).
    Letting the round trip finish (milliseconds) leaves it between statements, and the block
    ends as any failed one does: rolled back, its connection idle in the pool.
    """
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():  # cancelled again meanwhile: still to the end
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait((task,))
        if not task.cancelled():
            task.exception()  # retrieved: the cancellation is what the caller sees
        raise


async def _send(
    conn: psycopg.AsyncConnection[Any],
    ops: Sequence[Op],
    cur: psycopg.AsyncCursor[Any] | None = None,
) -> None:
    """Queue ``ops`` in the connection's pipeline (entered by the caller)."""
    cur = cur or conn.cursor()
    for sql, rows in ops:
        if rows:
            await cur.executemany(sql, [dict(r) for r in rows])


async def _pipelined(
    conn: psycopg.AsyncConnection[Any], ops: Sequence[Op], then: str | None = None
) -> None:
    """``ops``, then the command ``then``, in one round trip (a command alone is sent without a
    pipeline). Outside a transaction, ``ops`` are one of their own: the pipeline's (see
    ``write_and_commit``)."""
    if not ops and then is not None:
        await conn.execute(then, prepare=False)
        return
    async with conn.pipeline():
        await _send(conn, ops)
        if then is not None:
            await conn.execute(then, prepare=False)


async def _settle(conn: psycopg.AsyncConnection[Any]) -> None:
    """Roll back whatever a block left open (it failed, or its caller was cancelled), so
    the connection goes back to the pool idle. A ROLLBACK that fails has rolled back all the
    same: the pool then discards the connection."""
    if conn.broken or conn.info.transaction_status == TransactionStatus.IDLE:
        return
    with contextlib.suppress(psycopg.Error):
        await conn.execute("ROLLBACK", prepare=False)


def raise_if_lost(exc: BaseException, where: str) -> None:
    """A dead connection, or none to be had, is a ``StorageError``; other errors stay as is."""
    if isinstance(exc, PoolTimeout):
        raise StorageError(
            f"no connection to Postgres at {where} could be had in time: {reason(exc)}"
        ) from exc
    if connection_lost(exc):
        raise StorageError(f"lost the connection to Postgres at {where}: {reason(exc)}") from exc
