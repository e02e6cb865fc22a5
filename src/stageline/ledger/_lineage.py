"""Lineage: where a forked run came from, and which runs were forked from a run.

A fork's lineage row is written in the transaction that creates the run, so a run is never
seen without the lineage it was made with. Deleting a run (retention) deletes its own row; the
rows of its forks stay, naming a parent that is gone.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, insert, select

from stageline.ledger._schema import lineage as lineage_table

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["Lineage", "LineageSql"]


@dataclass(frozen=True, kw_only=True)
class Lineage:
    """Run ``run_id`` was forked from ``parent_run_id``: it starts at ``parent_step`` (that
    step's nodes run again) from the state of checkpoint ``parent_checkpoint_id``."""

    run_id: str
    parent_run_id: str
    parent_step: int | None
    parent_checkpoint_id: str
    created_at: float = field(default_factory=time.time)

    def to_row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Lineage:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return self.to_row()


class LineageSql:
    """Lineage rows of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:

        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    async def _insert_lineage(self, x: Executor, row: Lineage | None) -> None:
        if row is not None:
            await x.execute(self._sql(_INSERT), row.to_row())

    async def lineage(self, run_id: str) -> Lineage | None:
        """Where run ``run_id`` was forked from; None for a run that is no fork."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_ONE), {"run_id": run_id})
        return Lineage.from_row(rows[0]) if rows else None

    async def forks(self, run_id: str) -> list[Lineage]:
        """The runs forked from run ``run_id``, oldest first."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_FORKS), {"parent": run_id})
        return [Lineage.from_row(r) for r in rows]


_INSERT = insert(lineage_table)
_SELECT_ONE = select(lineage_table).where(lineage_table.c.run_id == bindparam("run_id"))
_SELECT_FORKS = (
    select(lineage_table)
    .where(lineage_table.c.parent_run_id == bindparam("parent"))
    .order_by(lineage_table.c.created_at, lineage_table.c.run_id)
)
