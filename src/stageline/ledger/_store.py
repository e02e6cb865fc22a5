"""LangGraph's key-value store (``BaseStore``) on the project's database.

What a graph's nodes keep across runs and threads (``runtime.store``, ``get_store()``, a
stage's ``ctx.store``, the SDK's ``client.store``) lives in LangGraph's own store, on the
database the ledger uses: ``AsyncSqliteStore`` on a SQLite file, ``AsyncPostgresStore`` on
Postgres (each in its own tables, ``store`` and ``store_migrations``, set up on first use), and
an ``InMemoryStore`` for ``memory://`` (it lives as long as the runner that opened it).
"""

from __future__ import annotations

import asyncio
import contextlib
import typing
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable
from typing import Any

from langgraph.store.base import BaseStore, Op, Result

from stageline.errors import StorageError
from stageline.ledger._backend import is_memory_url, mask_url, unsupported_url
from stageline.ledger._postgres import PostgresOptions
from stageline.ledger._sqlite import busy_timeout_ms
from stageline.ledger._sqlite_read import sqlite_path

__all__ = ["LazyStore", "open_store"]

SETUP_TRIES = 5
"""Tries at setting the store's tables up: processes opening a new database at once race to
create them, and the loser's next try finds them made."""

STORE_POOL_SIZE = 4
"""Connections of a Postgres store at most (a server's concurrent store calls)."""


@contextlib.asynccontextmanager
async def open_store(url: str) -> AsyncIterator[BaseStore]:
    """The store on the database ``url`` names, closed on exit. It connects and sets its tables
    up on first use (a process that never uses it holds no connection for it, and a database
    never used with it gets no tables); a failure then is a ``StorageError``."""
    if is_memory_url(url):
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()
        return
    if not url.startswith(("postgres", "sqlite")):
        raise unsupported_url(url)
    async with contextlib.AsyncExitStack() as stack:
        yield LazyStore(url, stack)


class LazyStore(BaseStore):
    """LangGraph's store for ``url``, opened on the first operation (and closed with ``stack``).

    Its async methods are the store's own; the sync ones (a sync node's ``get_store().get``, run
    on a worker thread) run them on the event loop the store was made on, as LangGraph's async
    stores do.
    """

    def __init__(self, url: str, stack: contextlib.AsyncExitStack) -> None:
        self._url = url
        self._stack = stack
        self._loop = asyncio.get_running_loop()
        self._lock = asyncio.Lock()
        self._store: BaseStore | None = None

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await (await self._opened()).abatch(ops)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:  # no loop in this thread: a worker thread
            on_loop = False
        if on_loop:
            raise asyncio.InvalidStateError(
                "a synchronous store call on the event loop would block it; "
                "use the async methods (aget, aput, asearch...) in async code"
            )
        return asyncio.run_coroutine_threadsafe(self.abatch(ops), self._loop).result()

    async def _opened(self) -> BaseStore:
        if self._store is None:
            async with self._lock:
                if self._store is None:
                    self._store = await self._open()
        return self._store

    async def _open(self) -> BaseStore:
        url = self._url
        opened: Any
        if url.startswith("postgres"):
            from langgraph.store.postgres import AsyncPostgresStore, PoolConfig

            opened = AsyncPostgresStore.from_conn_string(
                PostgresOptions.from_url(url).conninfo,
                pool_config=PoolConfig(min_size=1, max_size=STORE_POOL_SIZE),
            )
        else:
            from langgraph.store.sqlite.aio import AsyncSqliteStore

            opened = AsyncSqliteStore.from_conn_string(str(sqlite_path(url)))
        async with contextlib.AsyncExitStack() as stack:
            try:
                store = await stack.enter_async_context(opened)
            except Exception as exc:
                raise StorageError(f"cannot open the store on {mask_url(url)}: {exc}") from exc
            if url.startswith("sqlite"):  # waits for the ledger's writers as the ledger does
                await store.conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms(url)}")
            await _set_up(store.setup, url)
            self._stack.push_async_exit(stack.pop_all())  # kept open until the runner closes
        return typing.cast(BaseStore, store)


async def _set_up(setup: Callable[[], Coroutine[Any, Any, None]], url: str) -> None:
    """Run the store's own ``setup`` (its tables and migrations), again after a lost race."""
    for tried in range(1, SETUP_TRIES + 1):
        try:
            await setup()
            return
        except Exception as exc:
            if tried == SETUP_TRIES:
                raise StorageError(
                    f"cannot set up the store's tables on {mask_url(url)}: {exc}"
                ) from exc
            await asyncio.sleep(0.05 * tried)
