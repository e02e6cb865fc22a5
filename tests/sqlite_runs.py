"""A SQLite ledger file written and listed through the ledger's own store (tests of readers
that must answer as the store does)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stageline.ledger import Run
from stageline.ledger._sqlite import open_sqlite_ledger


async def write_runs(url: str, runs: Iterable[Run]) -> None:
    """Create (migrating if new) the ledger of ``url`` and add ``runs`` to it."""
    ledger, executor = await open_sqlite_ledger(url)
    try:
        for run in runs:
            await ledger.create_run(run)
        await ledger.flush()
    finally:
        await executor.close()


async def store_lists(url: str, **wanted: Any) -> list[dict[str, Any]]:
    """What the store's ``list_runs(**wanted)`` answers on ``url``, as JSON-ready dicts."""
    ledger, executor = await open_sqlite_ledger(url)
    try:
        return [r.to_dict() for r in await ledger.list_runs(**wanted)]
    finally:
        await executor.close()
