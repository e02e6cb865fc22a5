"""The ledger alone, for commands that only read it: no checkpoint saver, so no LangGraph."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from stageline.errors import ConfigError, StorageError
from stageline.ledger._base import LedgerStore

__all__ = ["open_ledger"]


@contextlib.asynccontextmanager
async def open_ledger(url: str) -> AsyncIterator[LedgerStore]:
    """The ledger named by ``url``, migrated if needed, closed on exit.

    Reading runs, events, waits and outcomes needs no checkpoint: this opens the database as
    ``open_backend`` does, minus LangGraph's saver (and its imports). ``memory://`` falls back
    to the full backend, which is one and the same object there.
    """
    from stageline.ledger import mask_url, open_backend

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
    elif url.startswith("memory"):
        from stageline.checkpoints import checkpoint_serde

        backend = await open_backend(url, checkpoint_serde())
        try:
            yield backend.ledger
        finally:
            await backend.aclose()
    else:
        await open_backend(url, None)  # type: ignore[arg-type]  # raises its ConfigError
        raise ConfigError(f"unsupported database URL {mask_url(url)!r}")  # pragma: no cover


async def refuse_legacy(ledger: LedgerStore, url: str) -> None:
    """``StorageError`` if the database still holds LangGraph's checkpoint tables."""
    from stageline.ledger import mask_url
    from stageline.ledger._sql import SqlLedger

    if isinstance(ledger, SqlLedger) and await ledger.legacy_checkpoints():
        raise StorageError(
            f"the database {mask_url(url)} was made by an older stageline (its checkpoints are "
            "in LangGraph's tables): run `stageline db upgrade` once to convert it"
        )
