"""The ledger alone, for commands that only read it: no checkpoint saver, so no LangGraph."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from stageline.errors import ConfigError
from stageline.ledger._backend import is_memory_url, mask_url, refuse_legacy, unsupported_url
from stageline.ledger._base import LedgerStore

__all__ = ["open_ledger"]


@contextlib.asynccontextmanager
async def open_ledger(url: str) -> AsyncIterator[LedgerStore]:
    """The ledger named by ``url``, migrated if needed, closed on exit.

    Reading runs, events, waits and outcomes needs no checkpoint: this opens the database as
    ``open_backend`` does, minus LangGraph's saver (and its imports). A ``memory://`` database
    belongs to the runner that opened it, so it is refused here: opened again it would be a
    new, empty one.
    """
    if is_memory_url(url):
        raise ConfigError(
            f"{url} keeps runs only in the memory of the process that runs them, so there is "
            "nothing here to read; use a database (sqlite:///PATH or postgresql://...)"
        )
    if url.startswith("postgres"):
        from stageline.ledger._postgres import open_postgres

        ledger, _, close = await open_postgres(url, None, masked=mask_url(url))
        try:
            await refuse_legacy(ledger, url)
            yield ledger
        finally:
            await ledger.flush()
            await close()
    elif url.startswith("sqlite"):
        from stageline.ledger._sqlite import open_sqlite_ledger

        sql_ledger, executor = await open_sqlite_ledger(url)
        try:
            await refuse_legacy(sql_ledger, url)
            yield sql_ledger
        finally:
            await sql_ledger.flush()
            await executor.close()
    else:
        raise unsupported_url(url)
