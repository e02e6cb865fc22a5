"""Capability outcomes: one row per node run, kept for ``stats`` and the learned router.

The SQL ledger stages outcome rows like node records, so they are written inside the
checkpoint's own commit (no extra commit per node). Nothing ties them to a run's other
rows: deleting a run (retention) leaves its outcomes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from stageline.ledger._schema import outcomes as outcomes_table

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["Outcome", "OutcomesSql"]


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How one node run went; keyed like its node record by (run, task, attempt, try)."""

    run_id: str
    task_id: str
    attempt: int = 1
    try_no: int = 1
    template: str
    node: str
    stage: str
    capability: str | None = None
    alternative: str | None = None
    """The alternative a router chose for this run of the node, if a router chose."""
    input_shape: str = ""
    """A hash of the keys and value types of the state the node received."""
    status: str
    """``succeeded`` or ``failed``."""
    failure_phase: str | None = None
    started_at: float
    finished_at: float
    latency: float
    input_tokens: float = 0.0
    output_tokens: float = 0.0
    cost: float = 0.0
    quality: float | None = None

    @property
    def key(self) -> tuple[str, str, int, int]:
        return (self.run_id, self.task_id, self.attempt, self.try_no)

    @property
    def tokens(self) -> float:
        return self.input_tokens + self.output_tokens

    def to_row(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Outcome:
        return cls(**{k: row[k] for k in cls.__dataclass_fields__})

    def to_dict(self) -> dict[str, Any]:
        return self.to_row()


class OutcomesSql:
    """Outcome rows of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:
        _staged_outcomes: dict[tuple[str, str, int, int], Outcome]
        _x: Executor
        _upsert: Any

        def _schedule_flush(self) -> None: ...
        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    def stage_outcome(self, outcome: Outcome) -> None:
        """Queue an outcome row; it is written with the next checkpoint (or flush)."""
        self._staged_outcomes[outcome.key] = outcome
        self._schedule_flush()

    @property
    def _outcome_upsert(self) -> Any:
        stmt = self.__dict__.get("_outcome_upsert_stmt")
        if stmt is None:
            base = self._upsert(outcomes_table)
            keys = ("run_id", "task_id", "attempt", "try_no")
            stmt = base.on_conflict_do_update(
                index_elements=list(keys),
                set_={
                    c.name: base.excluded[c.name] for c in outcomes_table.c if c.name not in keys
                },
            )
            self.__dict__["_outcome_upsert_stmt"] = stmt
        return stmt

    def _outcome_ops(self, rows: list[Outcome]) -> list[tuple[str, list[dict[str, Any]]]]:
        return [(self._sql(self._outcome_upsert), [o.to_row() for o in rows])] if rows else []

    async def record_outcomes(self, rows: Iterable[Outcome]) -> None:
        """Write outcome rows now, in their own transaction (imports, tests)."""
        ops = self._outcome_ops(list(rows))
        if ops:
            async with self._tx() as x:
                await x.execute_batch(ops)

    async def outcomes(
        self,
        *,
        template: str | None = None,
        since: float | None = None,
        node: str | None = None,
        routed: bool = False,
        limit: int | None = None,
    ) -> list[Outcome]:
        """Outcome rows, oldest first; ``limit`` keeps the newest; ``routed`` only where a
        router chose."""
        t = outcomes_table
        stmt = select(t)
        if template is not None:
            stmt = stmt.where(t.c.template == template)
        if since is not None:
            stmt = stmt.where(t.c.finished_at >= since)
        if node is not None:
            stmt = stmt.where(t.c.node == node)
        if routed:
            stmt = stmt.where(t.c.alternative.is_not(None))
        order = (t.c.finished_at, t.c.run_id, t.c.task_id, t.c.try_no)
        if limit:
            stmt = stmt.order_by(*(c.desc() for c in order)).limit(int(limit))
        else:
            stmt = stmt.order_by(*order)
        compiled = stmt.compile(dialect=self._x.dialect)
        async with self._read() as x:
            rows = await x.fetch(str(compiled), compiled.params)
        found = [Outcome.from_row(r) for r in rows]
        return found[::-1] if limit else found
