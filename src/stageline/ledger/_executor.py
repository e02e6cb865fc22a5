"""What a backend gives the SQL ledger: one connection's worth of SQL (``Executor``).

A leaf of the ledger package: the ledger's parts (``_sql`` and the mixins it is made of) name
the executor's type from here, so none of them imports another back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from sqlalchemy.engine.interfaces import Dialect

__all__ = ["Check", "Executor", "Op"]

Op = tuple[str, Sequence[Mapping[str, Any]]]
"""One ``executemany``: SQL and its rows."""

Check = tuple[str, dict[str, Any]]
"""A query whose rows' first column is the id of a run flagged for cancel, and its parameters."""


class Executor(Protocol):
    """A single connection's worth of SQL, as a backend provides it."""

    dialect: Dialect

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]: ...

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int: ...

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None: ...

    async def execute_batch(self, ops: Sequence[Op]) -> None:
        """Several ``execute_many`` calls in one round trip where the driver allows it."""
        ...

    async def commit(self) -> None: ...

    async def rollback(self) -> None: ...

    async def write_and_commit(self, ops: Sequence[Op], check: Check | None) -> list[str]:
        """``ops`` and ``check`` (the watched runs' cancel flags, one query) in one transaction,
        and its commit: all in one round trip (one hop to SQLite's thread). Returns the run ids
        whose flag is set."""
        ...
