"""Schedules (LangGraph's crons) in the ledger (mixed into ``SqlLedger``), and their due times.

A schedule keeps its next due time (``next_run_at``). Whoever fires it moves that time on with a
compare-and-set (``UPDATE ... WHERE next_run_at = <the due time it read>``) and records the
firing, with the run it starts, in the same transaction: of many processes that find the same
due time, exactly one moves it on, and only that one starts a run. A firing's row is the run's
lineage to its schedule (``fired_by``).

Missed due times (no process ran for a while): the schedule fires once for all of them, at the
first look after they passed, and its next due time is the first one after that look.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter
from sqlalchemy import bindparam, delete, insert, select, update

from stageline.errors import InputError
from stageline.ledger._schema import cron_fires as _f
from stageline.ledger._schema import crons as _c

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["Cron", "CronsSql", "check_schedule", "next_due"]


def _zone(timezone: str | None) -> ZoneInfo:
    try:
        return ZoneInfo(timezone or "UTC")
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise InputError(
            f"unknown time zone {timezone!r}: use an IANA name such as 'Europe/Paris'"
        ) from exc


def check_schedule(schedule: str, timezone: str | None = None) -> None:
    """Refuse (``InputError``) a cron expression or a time zone that is not one."""
    if not isinstance(schedule, str) or not croniter.is_valid(schedule):
        raise InputError(
            f"schedule {schedule!r} is not a cron expression: five fields, minute hour "
            "day-of-month month day-of-week (e.g. '*/5 * * * *'), and seconds as an optional sixth"
        )
    next_due(schedule, timezone, time.time())  # a date that never comes (30 Feb) is refused


def next_due(schedule: str, timezone: str | None, after: float) -> float:
    """The first time strictly after ``after`` (epoch seconds) that ``schedule`` names, read in
    ``timezone`` (None: UTC)."""
    start = datetime.fromtimestamp(after, tz=UTC).astimezone(_zone(timezone))
    try:
        return float(croniter(schedule, start).get_next(float))
    except CroniterError as exc:
        raise InputError(f"schedule {schedule!r} names no time that comes: {exc}") from exc


@dataclass(frozen=True, kw_only=True)
class Cron:
    """A schedule: it starts a run of ``assistant_id`` at each due time: a template, or an
    assistant made from one (``payload["graph_id"]`` names the template then)."""

    cron_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    assistant_id: str
    schedule: str
    thread_id: str | None = None
    """A thread's schedule starts that thread (once); None: each firing starts a new run."""
    timezone: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    """What each run is started with: ``input``, ``context``, and what the client sent."""
    metadata: dict[str, Any] = field(default_factory=dict)
    enabled: bool = True
    end_time: float | None = None
    next_run_at: float | None = None
    """The next due time; None once it is past ``end_time`` or disabled."""
    created_by: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["payload"] = json.dumps(self.payload, default=str)
        row["metadata"] = json.dumps(self.metadata, default=str)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Cron:
        data = {k: row[k] for k in cls.__dataclass_fields__}
        data["payload"] = json.loads(data["payload"] or "{}")
        data["metadata"] = json.loads(data["metadata"] or "{}")
        data["enabled"] = bool(data["enabled"])
        return cls(**data)

    @property
    def template(self) -> str:
        """The template its runs are of."""
        return str(self.payload.get("graph_id") or self.assistant_id)

    def due_after(self, after: float) -> float | None:
        """Its next due time after ``after``: None when disabled or past its end time."""
        if not self.enabled:
            return None
        due = next_due(self.schedule, self.timezone, after)
        return None if self.end_time is not None and due > self.end_time else due

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


class CronsSql:
    """Schedules of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    async def put_cron(self, cron: Cron, *, now: float | None = None) -> Cron:
        """Record a new schedule, its first due time counted from ``now``."""
        check_schedule(cron.schedule, cron.timezone)
        now = time.time() if now is None else now
        cron = replace(cron, next_run_at=cron.due_after(now), created_at=now, updated_at=now)
        async with self._tx() as x:
            await x.execute(self._sql(_INSERT), cron.to_row())
        return cron

    async def cron(self, cron_id: str) -> Cron | None:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_ONE), {"cron_id": cron_id})
        return Cron.from_row(rows[0]) if rows else None

    async def crons(
        self,
        *,
        assistant_id: str | None = None,
        thread_id: str | None = None,
        enabled: bool | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[Cron]:
        """Schedules matching every filter given (metadata: each pair equal), oldest first."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_ALL), {})
        found = [Cron.from_row(r) for r in rows]
        return [
            c
            for c in found
            if (assistant_id is None or c.assistant_id == assistant_id)
            and (thread_id is None or c.thread_id == thread_id)
            and (enabled is None or c.enabled == enabled)
            and all(c.metadata.get(k) == v for k, v in (metadata or {}).items())
        ]

    async def update_cron(
        self, cron_id: str, changes: Mapping[str, Any], *, now: float | None = None
    ) -> Cron | None:
        """Change a schedule (any ``Cron`` field but its id and times); its next due time is
        counted again from ``now``. None when there is no such schedule."""
        now = time.time() if now is None else now
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_ONE), {"cron_id": cron_id})
            if not rows:
                return None
            cron = replace(Cron.from_row(rows[0]), **dict(changes), updated_at=now)
            check_schedule(cron.schedule, cron.timezone)
            cron = replace(cron, next_run_at=cron.due_after(now))
            await x.execute(self._sql(_DELETE), {"cron_id": cron_id})
            await x.execute(self._sql(_INSERT), cron.to_row())
        return cron

    async def delete_cron(self, cron_id: str) -> bool:
        """Delete a schedule (its firings stay: the lineage of the runs it started)."""
        async with self._tx() as x:
            return bool(await x.execute(self._sql(_DELETE), {"cron_id": cron_id}))

    async def due_crons(self, now: float) -> list[Cron]:
        """Enabled schedules whose next due time is ``now`` or earlier, most overdue first."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_DUE), {"now": now})
        return [Cron.from_row(r) for r in rows]

    async def claim_fire(
        self, cron: Cron, *, run_id: str, next_run_at: float | None, now: float
    ) -> bool:
        """Move ``cron`` from the due time it was read with to ``next_run_at`` and record that
        this due time fires run ``run_id``; False (nothing written) when another process did."""
        due = cron.next_run_at
        if due is None:
            return False
        async with self._tx() as x:
            moved = await x.execute(
                self._sql(_MOVE),
                {"cron_id": cron.cron_id, "due": due, "next": next_run_at, "now": now},
            )
            if not moved:
                return False
            await x.execute(
                self._sql(_INSERT_FIRE),
                {"cron_id": cron.cron_id, "due_at": due, "run_id": run_id, "fired_at": now},
            )
        return True

    async def fired_by(self, run_id: str) -> str | None:
        """The schedule whose firing started run ``run_id`` (None: no schedule did)."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_FIRED_BY), {"run_id": run_id})
        return str(rows[0]["cron_id"]) if rows else None

    async def cron_fires(self, cron_id: str) -> list[dict[str, Any]]:
        """The firings of a schedule, newest first: due time, run id, when it fired."""
        async with self._read() as x:
            return await x.fetch(self._sql(_FIRES), {"cron_id": cron_id})


_INSERT = insert(_c)
_ONE = select(_c).where(_c.c.cron_id == bindparam("cron_id"))
_ALL = select(_c).order_by(_c.c.created_at, _c.c.cron_id)
_DELETE = delete(_c).where(_c.c.cron_id == bindparam("cron_id"))
_DUE = (
    select(_c)
    .where(_c.c.enabled.is_(True), _c.c.next_run_at <= bindparam("now"))
    .order_by(_c.c.next_run_at)
)
_MOVE = (
    update(_c)
    .where(_c.c.cron_id == bindparam("cron_id"), _c.c.next_run_at == bindparam("due"))
    .values(next_run_at=bindparam("next"), updated_at=bindparam("now"))
)
_INSERT_FIRE = insert(_f)
_FIRED_BY = select(_f.c.cron_id).where(_f.c.run_id == bindparam("run_id"))
_FIRES = (
    select(_f.c.due_at, _f.c.run_id, _f.c.fired_at)
    .where(_f.c.cron_id == bindparam("cron_id"))
    .order_by(_f.c.due_at.desc())
)
