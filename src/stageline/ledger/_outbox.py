"""The sinks' outbox: events are delivered from the ledger, with a cursor per sink and run.

Each sink (by a stable id) gets the events written from the time it was first configured on.
A deliverer *claims* a run's next events for a sink with a conditional update (the row count
says who won), so two processes never send one batch at once; it *acknowledges* a delivered
batch by moving the cursor past it, or *releases* it to back off after a failure. Finding
what is due scans events from the sink's watermark (by the ``ts`` index), before which every
event was acknowledged; the watermark trails the present by ``WATERMARK_LAG`` seconds, so an
event committed a little after its timestamp is never passed over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, bindparam, func, literal_column, or_, select, update

from stageline.ledger._schema import events, sink_cursors, sinks
from stageline.ledger.records import Event

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["WATERMARK_LAG", "Claim", "OutboxSql", "SinkStart"]

WATERMARK_LAG = 300.0
"""Seconds the watermark stays behind the present at least."""
DUE_RUNS = 100
"""Runs one look for due work returns at most."""


@dataclass(frozen=True, kw_only=True)
class SinkStart:
    started_at: float
    watermark: float


@dataclass(frozen=True, kw_only=True)
class Claim:
    """A run's next events for one sink, held by one deliverer until acknowledged or released."""

    run_id: str
    after: int
    """The sink's cursor: the last seq it acknowledged."""
    events: list[Event] = field(default_factory=list)
    attempts: int = 0
    """Failed attempts at this batch so far."""


class OutboxSql:
    """The outbox over SQL (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:
        _upsert: Any

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    def _outbox_insert(self, table: Any, keys: list[str]) -> Any:
        name = f"_outbox_insert_{table.name}"
        stmt = self.__dict__.get(name)
        if stmt is None:
            stmt = self._upsert(table).on_conflict_do_nothing(index_elements=keys)
            self.__dict__[name] = stmt
        return stmt

    @property
    def _new_cursor(self) -> Any:
        stmt = self.__dict__.get("_new_cursor_stmt")
        if stmt is None:
            stmt = self._outbox_insert(sink_cursors, ["sink_id", "run_id"]).values(
                **_NEW_CURSOR_VALUES
            )
            self.__dict__["_new_cursor_stmt"] = stmt
        return stmt

    async def sink_start(self, sink_id: str, *, now: float | None = None) -> SinkStart:
        """Register a sink (the first time: it starts now); its start and watermark."""
        now = time.time() if now is None else now
        async with self._tx() as x:
            await x.execute(
                self._sql(self._outbox_insert(sinks, ["sink_id"])),
                {"sink_id": sink_id, "started_at": now, "watermark": now},
            )
            rows = await x.fetch(self._sql(_SINK), {"sink_id": sink_id})
        return SinkStart(
            started_at=float(rows[0]["started_at"]), watermark=float(rows[0]["watermark"])
        )

    async def due_runs(self, sink_id: str, *, since: float, now: float | None = None) -> list[str]:
        """Runs with events the sink has not acknowledged that are not backing off, the
        longest waiting first."""
        params = {"sink_id": sink_id, "since": since, "now": time.time() if now is None else now}
        async with self._read() as x:
            rows = await x.fetch(self._sql(_DUE), params)
        return [str(r["run_id"]) for r in rows[:DUE_RUNS]]

    async def claim_events(
        self,
        sink_id: str,
        run_id: str,
        *,
        holder: str,
        until: float,
        started_at: float,
        limit: int,
        steal: str | None = None,
        now: float | None = None,
    ) -> Claim | str | None:
        """Hold the run's next ``limit`` events for the sink: a ``Claim`` (with no events when
        none is due, and then not held), or the live holder's name (None while it backs off).
        ``steal`` takes the claim of that holder (known to be dead)."""
        now = time.time() if now is None else now
        key = {"sink_id": sink_id, "run_id": run_id}
        async with self._tx() as x:
            await x.execute(
                self._sql(self._new_cursor), {**key, "started_at": started_at, "now": now}
            )
            won = await x.execute(
                self._sql(_CLAIM),
                {**key, "holder": holder, "until": until, "now": now, "steal": steal or ""},
            )
            [row] = await x.fetch(self._sql(_CURSOR), key)
            if not won:
                held = row["claimed_by"] and (row["claimed_until"] or 0) >= now
                return str(row["claimed_by"]) if held else None
            after = int(row["seq"])
            upto = row["batch_upto"] or after + int(limit)  # a retry: the same batch again
            found = await x.fetch(
                self._sql(_NEXT_EVENTS), {"run_id": run_id, "after": after, "upto": upto}
            )
            if not found:
                await x.execute(
                    self._sql(_RELEASE),
                    {**key, "holder": holder, "retry_at": None, "upto": None, "now": now},
                )
        return Claim(
            run_id=run_id,
            after=after,
            events=[Event.from_row(r) for r in found],
            attempts=int(row["attempts"]),
        )

    async def ack_events(self, sink_id: str, run_id: str, *, holder: str, seq: int) -> bool:
        """The sink has everything up to ``seq``; False if the claim was lost meanwhile."""
        async with self._tx() as x:
            return bool(
                await x.execute(
                    self._sql(_ACK),
                    {
                        "sink_id": sink_id,
                        "run_id": run_id,
                        "holder": holder,
                        "seq": seq,
                        "now": time.time(),
                    },
                )
            )

    async def release_events(
        self,
        sink_id: str,
        run_id: str,
        *,
        holder: str,
        retry_at: float | None = None,
        failed_upto: int | None = None,
    ) -> None:
        """Let go of a claim; after a failed batch (``failed_upto``: its last seq), the same
        batch is tried again, not before ``retry_at``."""
        async with self._tx() as x:
            await x.execute(
                self._sql(_RELEASE if failed_upto is None else _FAIL),
                {
                    "sink_id": sink_id,
                    "run_id": run_id,
                    "holder": holder,
                    "retry_at": retry_at,
                    "upto": failed_upto,
                    "now": time.time(),
                },
            )

    async def advance_watermark(
        self, sink_id: str, *, since: float, now: float | None = None
    ) -> float:
        """Move the sink's watermark up to its oldest unacknowledged event (at most
        ``WATERMARK_LAG`` seconds before now); the new watermark."""
        now = time.time() if now is None else now
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_OLDEST), {"sink_id": sink_id, "since": since})
            oldest = rows[0]["oldest"] if rows else None
            mark = min(now - WATERMARK_LAG, float(oldest) if oldest is not None else now)
            if mark > since:
                await x.execute(self._sql(_SET_MARK), {"sink_id": sink_id, "mark": mark})
                return mark
        return since

    async def sink_cursor(self, sink_id: str, run_id: str) -> int | None:
        """The last seq of the run the sink acknowledged (None: it has not met the run)."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_CURSOR), {"sink_id": sink_id, "run_id": run_id})
        return int(rows[0]["seq"]) if rows else None


# -- statements -----------------------------------------------------------------------------

_e, _c = events, sink_cursors
_SINK = select(sinks).where(sinks.c.sink_id == bindparam("sink_id"))
_JOIN = _e.outerjoin(_c, and_(_c.c.sink_id == bindparam("sink_id"), _c.c.run_id == _e.c.run_id))
_UNSENT = or_(_c.c.run_id.is_(None), _e.c.seq > _c.c.seq)
# Runs another deliverer holds are due too: the claim tells whether its holder still lives.
_FREE = or_(_c.c.run_id.is_(None), _c.c.retry_at.is_(None), _c.c.retry_at <= bindparam("now"))
_FIRST = func.min(_e.c.ts).label("first")
_DUE = (
    select(_e.c.run_id, _FIRST)
    .select_from(_JOIN)
    .where(_e.c.ts >= bindparam("since"), _UNSENT, _FREE)
    .group_by(_e.c.run_id)
    .order_by(_FIRST)
)
_OLDEST = (
    select(func.min(_e.c.ts).label("oldest"))
    .select_from(_JOIN)
    .where(_e.c.ts >= bindparam("since"), _UNSENT)
)
_KEY = and_(_c.c.sink_id == bindparam("sink_id"), _c.c.run_id == bindparam("run_id"))
_CURSOR = select(_c).where(_KEY)
_BEFORE_START = (
    select(func.coalesce(func.max(_e.c.seq), literal_column("0")))
    .where(_e.c.run_id == bindparam("run_id"), _e.c.ts < bindparam("started_at"))
    .scalar_subquery()
)
_NEW_CURSOR_VALUES = {
    "sink_id": bindparam("sink_id"),
    "run_id": bindparam("run_id"),
    "seq": _BEFORE_START,
    "attempts": literal_column("0"),
    "updated_at": bindparam("now"),
}
_CLAIM = (
    update(_c)
    .where(
        _KEY,
        or_(
            _c.c.claimed_by.is_(None),
            _c.c.claimed_until < bindparam("now"),
            _c.c.claimed_by == bindparam("holder"),
            _c.c.claimed_by == bindparam("steal"),
        ),
        or_(_c.c.retry_at.is_(None), _c.c.retry_at <= bindparam("now")),
    )
    .values(claimed_by=bindparam("holder"), claimed_until=bindparam("until"))
)
_NEXT_EVENTS = (  # a run's seqs have no gap: the next ``limit`` are after < seq <= upto
    select(_e)
    .where(
        _e.c.run_id == bindparam("run_id"),
        _e.c.seq > bindparam("after"),
        _e.c.seq <= bindparam("upto"),
    )
    .order_by(_e.c.seq)
)
_NULL: Any = literal_column("NULL")
_ACK = (
    update(_c)
    .where(_KEY, _c.c.claimed_by == bindparam("holder"), _c.c.seq < bindparam("seq"))
    .values(
        seq=bindparam("seq"),
        claimed_by=_NULL,
        claimed_until=_NULL,
        attempts=literal_column("0"),
        retry_at=_NULL,
        batch_upto=_NULL,
        updated_at=bindparam("now"),
    )
)
_RELEASE = (
    update(_c)
    .where(_KEY, _c.c.claimed_by == bindparam("holder"))
    .values(claimed_by=_NULL, claimed_until=_NULL, updated_at=bindparam("now"))
)
_FAIL = (
    update(_c)
    .where(_KEY, _c.c.claimed_by == bindparam("holder"))
    .values(
        claimed_by=_NULL,
        claimed_until=_NULL,
        attempts=_c.c.attempts + literal_column("1"),
        retry_at=bindparam("retry_at"),
        batch_upto=bindparam("upto"),
        updated_at=bindparam("now"),
    )
)
_SET_MARK = (
    update(sinks)
    .where(sinks.c.sink_id == bindparam("sink_id"), sinks.c.watermark < bindparam("mark"))
    .values(watermark=bindparam("mark"))
)
