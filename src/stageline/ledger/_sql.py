"""The ledger over SQL: one implementation for every dialect, over a small executor.

Hot-path writes (node records, events) are *staged* in memory and written inside the
checkpoint saver's own transaction, so a step costs no extra commit: a node's record is
durable no later than the checkpoint that makes the node count as done. Staged writes that
wait longer than ``FLUSH_DELAY`` (a slow node's ``started`` event) are committed on their own,
so people watching see progress promptly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from sqlalchemy import and_, bindparam, delete, func, insert, or_, select, update
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.sql import ClauseElement

from stageline.errors import InvalidTransition, LeaseHeld, RunNotFound
from stageline.ledger._base import Publisher, holder_is_dead
from stageline.ledger._schema import MIGRATIONS, events, node_records, runs, schema_version
from stageline.ledger.records import Event, NodeRecord, Run, RunStatus

__all__ = ["Executor", "SqlLedger"]

FLUSH_DELAY = 0.15


class Executor(Protocol):
    """A single connection's worth of SQL, as a backend provides it."""

    dialect: Dialect

    async def fetch(self, sql: str, params: Mapping[str, Any]) -> list[dict[str, Any]]: ...

    async def execute(self, sql: str, params: Mapping[str, Any]) -> int: ...

    async def execute_many(self, sql: str, params: Sequence[Mapping[str, Any]]) -> None: ...

    async def commit(self) -> None: ...

    async def rollback(self) -> None: ...


class SqlLedger:
    """Runs, node records and events in SQL tables beside LangGraph's checkpoint tables."""

    def __init__(
        self,
        executor: Executor,
        *,
        lock: asyncio.Lock,
        upsert: Callable[..., Any],
        url: str,
    ) -> None:
        self._x = executor
        self._lock = lock
        """The saver's lock: one statement stream on the shared connection at a time."""
        self._gate = asyncio.Lock()
        """Held across a whole ledger transaction, and across staged write + saver commit."""
        self._upsert = upsert
        self._compiled: dict[int, tuple[ClauseElement, str]] = {}
        self._staged_nodes: dict[tuple[str, str, int, int], NodeRecord] = {}
        self._staged_events: list[Event] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self._flush_task: asyncio.Task[None] | None = None
        self.publisher: Publisher | None = None
        self.url = url

    # -- plumbing ---------------------------------------------------------------------------

    def _sql(self, stmt: ClauseElement) -> str:
        # Keyed by id: only module-level (long-lived) statements come here, and the entry keeps
        # the statement alive so its id cannot be reused by another one.
        key = id(stmt)
        hit = self._compiled.get(key)
        if hit is None or hit[0] is not stmt:
            hit = (stmt, str(stmt.compile(dialect=self._x.dialect)))
            self._compiled[key] = hit
        return hit[1]

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Executor]:
        async with self._gate, self._lock:
            try:
                yield self._x
            except BaseException:
                await self._x.rollback()
                raise
            await self._x.commit()

    async def setup(self) -> None:
        """Apply pending migrations."""
        dialect = self._x.dialect
        async with self._tx() as x:
            for stmt in _ddl(schema_version, dialect):
                await x.execute(stmt, {})
            rows = await x.fetch(self._sql(_SELECT_VERSION), {})
            current = rows[0]["v"] or 0 if rows else 0
            for number, migration in enumerate(MIGRATIONS, start=1):
                if number <= current:
                    continue
                for stmt in migration(dialect):
                    await x.execute(stmt, {})
                await x.execute(
                    self._sql(_INSERT_VERSION), {"version": number, "applied_at": time.time()}
                )

    async def schema_version(self) -> int:
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT_VERSION), {})
        return int(rows[0]["v"] or 0) if rows else 0

    # -- runs -------------------------------------------------------------------------------

    async def create_run(self, run: Run, *, events: Iterable[Event] = ()) -> Run:
        async with self._tx() as x:
            if await x.fetch(self._sql(_SELECT_RUN), {"run_id": run.run_id}):
                raise InvalidTransition(f"run {run.run_id} already exists")
            await x.execute(self._sql(_INSERT_RUN), run.to_row())
            written = await self._write_events(x, run.run_id, list(events))
        self._publish(written)
        return run

    async def get_run(self, run_id: str) -> Run:
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
        if not rows:
            raise RunNotFound(run_id)
        return Run.from_row(rows[0])

    async def list_runs(
        self, *, status: str | None = None, template: str | None = None, limit: int = 100
    ) -> list[Run]:
        stmt = select(runs)
        if status:
            stmt = stmt.where(runs.c.status == status)
        if template:
            stmt = stmt.where(runs.c.template == template)
        stmt = stmt.order_by(runs.c.created_at.desc()).limit(limit)
        compiled = stmt.compile(dialect=self._x.dialect)
        async with self._tx() as x:
            rows = await x.fetch(str(compiled), compiled.params)
        return [Run.from_row(r) for r in rows]

    async def transition(
        self,
        run_id: str,
        status: RunStatus,
        *,
        events: Iterable[Event] = (),
        expect: Iterable[RunStatus] | None = None,
        **fields: Any,
    ) -> Run:
        """Set a run's status (and fields) and append events, in one transaction.

        Staged writes go first, so a terminal event always follows the node records it sums up.
        ``expect`` refuses the change unless the run is in one of those statuses.
        """
        values = {**fields, "status": str(status), "updated_at": time.time()}
        stmt = update(runs).where(runs.c.run_id == run_id)
        if expect is not None:
            allowed = [str(s) for s in expect]
            stmt = stmt.where(runs.c.status.in_(allowed))
        stmt = stmt.values(**values)
        compiled = stmt.compile(
            dialect=self._x.dialect, compile_kwargs={"render_postcompile": True}
        )
        params = compiled.params
        async with self._tx() as x:
            staged = await self._write_staged(x)
            count = await x.execute(str(compiled), params)
            if count == 0:
                rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
                if not rows:
                    raise RunNotFound(run_id)
                raise InvalidTransition(
                    f"run {run_id} is {rows[0]['status']}; cannot make it {status}"
                )
            written = await self._write_events(x, run_id, list(events))
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
        self._publish(staged + written)
        return Run.from_row(rows[0])

    async def request_cancel(self, run_id: str) -> Run:
        async with self._tx() as x:
            await x.execute(
                self._sql(_REQUEST_CANCEL), {"run_id": run_id, "now": time.time(), "flag": True}
            )
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
        if not rows:
            raise RunNotFound(run_id)
        return Run.from_row(rows[0])

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, holder: str, ttl: float) -> Run:
        """Take the run's lease atomically, or raise ``LeaseHeld`` naming the live holder."""
        now = time.time()
        async with self._tx() as x:
            count = await x.execute(
                self._sql(_TAKE_LEASE),
                {"run_id": run_id, "holder": holder, "expires": now + ttl, "now": now},
            )
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
            if not rows:
                raise RunNotFound(run_id)
            current = Run.from_row(rows[0])
            if count == 0 and current.lease_holder and holder_is_dead(current.lease_holder):
                # Same host, process gone: its lease cannot be renewed, so take it now.
                count = await x.execute(
                    self._sql(_STEAL_LEASE),
                    {"run_id": run_id, "holder": holder, "expires": now + ttl,
                     "old": current.lease_holder},
                )
                rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
                current = Run.from_row(rows[0])
        if count == 0:
            raise LeaseHeld(
                run_id, current.lease_holder or "?",
                time.strftime("%H:%M:%S", time.localtime(current.lease_expires_at or now)),
            )
        return current

    async def renew_lease(self, run_id: str, holder: str, ttl: float) -> Run | None:
        """Extend the lease; returns the run, or None if the lease was lost."""
        async with self._tx() as x:
            count = await x.execute(
                self._sql(_RENEW_LEASE),
                {"run_id": run_id, "holder": holder, "expires": time.time() + ttl},
            )
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
        return Run.from_row(rows[0]) if count and rows else None

    async def release_lease(self, run_id: str, holder: str) -> None:
        async with self._tx() as x:
            await x.execute(
                self._sql(_RELEASE_LEASE),
                {"run_id": run_id, "holder": holder, "none_holder": None, "none_expires": None},
            )

    # -- node records and events ------------------------------------------------------------

    def stage_node(self, record: NodeRecord) -> None:
        """Queue a node record; it is written with the next checkpoint (or flush)."""
        key = (record.run_id, record.task_id, record.attempt, record.try_no)
        self._staged_nodes[key] = record
        self._schedule_flush()

    def stage_event(self, event: Event) -> None:
        """Queue an event; it is written with the next checkpoint (or flush)."""
        self._staged_events.append(event)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        if self._flush_handle is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return
            self._flush_handle = loop.call_later(FLUSH_DELAY, self._start_flush)

    def _start_flush(self) -> None:
        self._flush_handle = None
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Commit staged writes now."""
        if not (self._staged_nodes or self._staged_events):
            return
        async with self._tx() as x:
            written = await self._write_staged(x)
        self._publish(written)

    async def write_staged_before_checkpoint(self) -> list[Event]:
        """Called by the saver, holding ``gate``: write staged rows into its transaction."""
        if not (self._staged_nodes or self._staged_events):
            return []
        async with self._lock:
            return await self._write_staged(self._x)

    @property
    def gate(self) -> asyncio.Lock:
        return self._gate

    async def _write_staged(self, x: Executor) -> list[Event]:
        nodes = list(self._staged_nodes.values())
        pending = self._staged_events
        self._staged_nodes = {}
        self._staged_events = []
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        try:
            if nodes:
                await x.execute_many(self._sql(self._node_upsert), [n.to_row() for n in nodes])
            by_run: dict[str, list[Event]] = {}
            for ev in pending:
                by_run.setdefault(ev.run_id, []).append(ev)
            written: list[Event] = []
            for run_id, evs in by_run.items():
                written += await self._write_events(x, run_id, evs)
            return written
        except BaseException:
            # Put them back: the caller's transaction is rolled back or never committed.
            for n in nodes:
                self._staged_nodes.setdefault((n.run_id, n.task_id, n.attempt, n.try_no), n)
            self._staged_events = pending + self._staged_events
            raise

    async def _write_events(self, x: Executor, run_id: str, evs: list[Event]) -> list[Event]:
        if not evs:
            return []
        rows = await x.fetch(self._sql(_BUMP_SEQ), {"run_id": run_id, "n": len(evs)})
        if not rows:
            raise RunNotFound(run_id)
        last = int(rows[0]["last_seq"])
        first = last - len(evs) + 1
        numbered = [_with_seq(ev, first + i) for i, ev in enumerate(evs)]
        await x.execute_many(self._sql(_INSERT_EVENTS), [ev.to_row() for ev in numbered])
        return numbered

    def _publish(self, written: list[Event]) -> None:
        if written and self.publisher is not None:
            self.publisher(written)

    @property
    def _node_upsert(self) -> Any:
        stmt = self.__dict__.get("_node_upsert_stmt")
        if stmt is None:
            base = self._upsert(node_records)
            stmt = base.on_conflict_do_update(
                index_elements=["run_id", "task_id", "attempt", "try_no"],
                set_={c: base.excluded[c] for c in
                      ("status", "finished_at", "metrics", "error", "failure_phase")},
            )
            self.__dict__["_node_upsert_stmt"] = stmt
        return stmt

    async def append_events(self, run_id: str, evs: Iterable[Event]) -> list[Event]:
        """Write events now, in their own transaction."""
        async with self._tx() as x:
            written = await self._write_events(x, run_id, list(evs))
        self._publish(written)
        return written

    async def node_records(self, run_id: str) -> list[NodeRecord]:
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT_NODES), {"run_id": run_id})
        return [NodeRecord.from_row(r) for r in rows]

    async def events(
        self, run_id: str, *, after: int = 0, categories: Iterable[str] | None = None
    ) -> list[Event]:
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT_EVENTS), {"run_id": run_id, "after": after})
        found = [Event.from_row(r) for r in rows]
        if categories is not None:
            wanted = set(categories)
            found = [e for e in found if e.category in wanted]
        return found

    async def delete_run(self, run_id: str) -> None:
        async with self._tx() as x:
            for stmt in _DELETE_RUN:
                await x.execute(self._sql(stmt), {"run_id": run_id})


def _with_seq(ev: Event, seq: int) -> Event:
    from dataclasses import replace

    return replace(ev, seq=seq)


def _ddl(table: Any, dialect: Dialect) -> list[str]:
    from sqlalchemy.schema import CreateTable

    return [str(CreateTable(table, if_not_exists=True).compile(dialect=dialect))]


_INSERT_VERSION = insert(schema_version)
_INSERT_RUN = insert(runs)
_INSERT_EVENTS = insert(events)
_DELETE_RUN = tuple(
    delete(t).where(t.c.run_id == bindparam("run_id")) for t in (events, node_records, runs)
)
_INSERT_VERSION = insert(schema_version)
_INSERT_RUN = insert(runs)
_INSERT_EVENT = insert(events)
_DELETE_RUN = tuple(
    delete(t).where(t.c.run_id == bindparam("run_id")) for t in (events, node_records, runs)
)
_SELECT_VERSION = select(func.max(schema_version.c.version).label("v"))
_SELECT_RUN = select(runs).where(runs.c.run_id == bindparam("run_id"))
_SELECT_NODES = (
    select(node_records)
    .where(node_records.c.run_id == bindparam("run_id"))
    .order_by(node_records.c.started_at, node_records.c.node)
)
_SELECT_EVENTS = (
    select(events)
    .where(and_(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after")))
    .order_by(events.c.seq)
)
_BUMP_SEQ = (
    update(runs)
    .where(runs.c.run_id == bindparam("run_id"))
    .values(last_seq=runs.c.last_seq + bindparam("n"))
    .returning(runs.c.last_seq)
)
_TAKE_LEASE = (
    update(runs)
    .where(
        and_(
            runs.c.run_id == bindparam("run_id"),
            or_(
                runs.c.lease_holder.is_(None),
                runs.c.lease_expires_at < bindparam("now"),
                runs.c.lease_holder == bindparam("holder"),
            ),
        )
    )
    .values(lease_holder=bindparam("holder"), lease_expires_at=bindparam("expires"))
)
_STEAL_LEASE = (
    update(runs)
    .where(and_(runs.c.run_id == bindparam("run_id"), runs.c.lease_holder == bindparam("old")))
    .values(lease_holder=bindparam("holder"), lease_expires_at=bindparam("expires"))
)
_RENEW_LEASE = (
    update(runs)
    .where(and_(runs.c.run_id == bindparam("run_id"), runs.c.lease_holder == bindparam("holder")))
    .values(lease_expires_at=bindparam("expires"))
)
_RELEASE_LEASE = (
    update(runs)
    .where(and_(runs.c.run_id == bindparam("run_id"), runs.c.lease_holder == bindparam("holder")))
    .values(lease_holder=bindparam("none_holder"), lease_expires_at=bindparam("none_expires"))
)
_REQUEST_CANCEL = (
    update(runs)
    .where(runs.c.run_id == bindparam("run_id"))
    .values(cancel_requested=bindparam("flag"), updated_at=bindparam("now"))
)
