"""LangGraph's key-value store (``BaseStore``) on the project's database.

What a graph's nodes keep across runs and threads (``runtime.store``, ``get_store()``, a
stage's ``ctx.store``, the SDK's ``client.store``) lives in LangGraph's own store, on the
database the ledger uses: ``AsyncSqliteStore`` on a SQLite file, ``AsyncPostgresStore`` on
Postgres (each in its own tables, ``store`` and ``store_migrations``, set up on first open), and
an ``InMemoryStore`` for ``memory://`` (it lives as long as the runner that opened it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from stageline.errors import StorageError
from stageline.ledger._backend import is_memory_url, mask_url, unsupported_url
from stageline.ledger._postgres import PostgresOptions
from stageline.ledger._sqlite import busy_timeout_ms
from stageline.ledger._sqlite_read import sqlite_path

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore

__all__ = ["open_store"]

SETUP_TRIES = 5
"""Tries at setting the store's tables up: processes opening a new database at once race to
create them, and the loser's next try finds them made."""

STORE_POOL_SIZE = 4
"""Connections of a Postgres store at most (a server's concurrent store calls)."""


@contextlib.asynccontextmanager
async def open_store(url: str) -> AsyncIterator[BaseStore]:
    """The store on the database ``url`` names, set up, closed on exit; ``StorageError`` if it
    cannot be opened or set up."""
    if is_memory_url(url):
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()
        return
    if url.startswith("postgres"):
        from langgraph.store.postgres import AsyncPostgresStore, PoolConfig

        opened: Any = AsyncPostgresStore.from_conn_string(
            PostgresOptions.from_url(url).conninfo,
            pool_config=PoolConfig(min_size=1, max_size=STORE_POOL_SIZE),
        )
    elif url.startswith("sqlite"):
        from langgraph.store.sqlite.aio import AsyncSqliteStore

        opened = AsyncSqliteStore.from_conn_string(str(sqlite_path(url)))
    else:
        raise unsupported_url(url)
    async with contextlib.AsyncExitStack() as stack:
        try:
            store = await stack.enter_async_context(opened)
        except Exception as exc:
            raise StorageError(f"cannot open the store on {mask_url(url)}: {exc}") from exc
        if url.startswith("sqlite"):  # waits for the ledger's writers as the ledger does
            await store.conn.execute(f"PRAGMA busy_timeout={busy_timeout_ms(url)}")
        await _set_up(store.setup, url)
        yield store


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
