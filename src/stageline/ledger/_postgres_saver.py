"""LangGraph's Postgres saver over the ledger's pool: its checkpoint and write pipelines also
carry the ledger's staged rows, and a connection found dead is replaced and the call retried."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import psycopg
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg_pool import AsyncConnectionPool

from stageline.ledger._postgres_pool import connection_lost, raise_if_lost
from stageline.ledger._sql import SqlLedger

__all__ = ["PgSaver"]

_T = TypeVar("_T")


class PgSaver(AsyncPostgresSaver):
    """LangGraph's saver whose checkpoint and write pipelines also carry the ledger's staged
    rows: they commit together at the pipeline's one sync, so a step costs no extra round trip
    and a node's record is durable exactly when the checkpoint that marks it done is."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        ledger: SqlLedger,
        serde: SerializerProtocol,
        where: str,
    ) -> None:
        super().__init__(pool, serde=serde)
        self._ledger = ledger
        self._where = where

    @asynccontextmanager
    async def _cursor(self, *, pipeline: bool = False) -> AsyncIterator[Any]:
        if not pipeline:
            async with super()._cursor() as cur:
                yield cur
            return
        written: list[Any] = []
        undo: Callable[[], None] = _noop
        flagged: list[str] = []
        try:
            async with super()._cursor(pipeline=True) as cur:
                yield cur
                ops, written, undo = self._ledger.take_staged()
                for sql, rows in ops:
                    await cur.executemany(sql, rows)
                check = self._ledger.cancel_check()
                if check is not None:  # the watched runs' cancel flags, in the same round trip
                    sql, run_ids = check
                    for run_id in run_ids:
                        await cur.execute(sql, {"run_id": run_id})
                        row = await cur.fetchone()
                        if row and row["cancel_requested"]:
                            flagged.append(run_id)
        except BaseException:
            undo()
            raise
        self._ledger._publish(written)
        self._ledger.cancels_seen(flagged)

    async def _retry(self, call: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``call``; if its connection had died, once more on a fresh one.

        Safe: a call whose connection died before its commit left nothing behind, and every
        saver write is an upsert, so a repeat of one that did commit changes nothing.
        """
        try:
            return await call()
        except psycopg.OperationalError as exc:
            if not connection_lost(exc):
                raise_if_lost(exc, self._where)
                raise
            assert isinstance(self.conn, AsyncConnectionPool)
            await self.conn.check()
        try:
            return await call()
        except psycopg.OperationalError as exc:
            raise_if_lost(exc, self._where)
            raise

    async def aget_tuple(self, config: Any) -> Any:
        return await self._retry(lambda: super(PgSaver, self).aget_tuple(config))

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        return await self._retry(
            lambda: super(PgSaver, self).aput(config, checkpoint, metadata, new_versions)
        )

    async def aput_writes(
        self, config: Any, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._retry(
            lambda: super(PgSaver, self).aput_writes(config, writes, task_id, task_path)
        )

    async def adelete_thread(self, thread_id: str) -> None:
        await self._retry(lambda: super(PgSaver, self).adelete_thread(thread_id))

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        # Retried only before its first row: after that the caller has seen part of the list.
        async def first() -> tuple[AsyncIterator[Any], Any]:
            rows = super(PgSaver, self).alist(config, **kwargs)
            try:
                return rows, await anext(rows)
            except BaseException:
                await rows.aclose()  # type: ignore[attr-defined]
                raise

        try:
            rows, item = await self._retry(first)
        except StopAsyncIteration:
            return
        try:
            yield item
            async for item in rows:
                yield item
        finally:
            await rows.aclose()  # type: ignore[attr-defined]


def _noop() -> None:
    return None
