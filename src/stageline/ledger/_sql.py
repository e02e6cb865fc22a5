"""The ledger over SQL: one implementation for every dialect, over a small executor.

Hot-path writes (node records, events) are *staged* in memory and written inside the
checkpoint saver's own transaction, so a step costs no extra commit: a node's record is
durable no later than the checkpoint that makes the node count as done. Staged writes that
wait longer than ``FLUSH_DELAY`` (a slow node's ``started`` event) are committed on their own,
so people watching see progress promptly.

A task's pending checkpoint writes are staged the same way when its run is advanced here and
no other node of the run is running (``commit_writes``): LangGraph saves the step's checkpoint
right after the last task of a step finishes, so they ride in that commit, and a step costs
one commit, not two. While a sibling still runs they are committed at once, so a node that
finished is not re-run after a crash because a slow sibling held its writes back; and when the
graph stops short of a checkpoint (an error, an interrupt) the runner flushes them before it
does anything else, as LangGraph's own savers have them saved by then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    bindparam,
    false,
    or_,
    select,
    update,
)
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.sql import ClauseElement

from stageline.errors import InvalidTransition, RunNotFound
from stageline.ledger._assistants import AssistantsSql
from stageline.ledger._base import Publisher
from stageline.ledger._chat import ChatSql
from stageline.ledger._commit_groups import CommitGroups
from stageline.ledger._crons import CronsSql
from stageline.ledger._executor import Check, Executor, Op
from stageline.ledger._human import WaitChanges
from stageline.ledger._lineage import Lineage, LineageSql
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._outbox import OutboxSql
from stageline.ledger._outcome_stats import OutcomeStatsSql
from stageline.ledger._outcomes import Outcome, OutcomesSql
from stageline.ledger._schema import runs, schema_version
from stageline.ledger._search import RunSearchSql
from stageline.ledger._sessions import SessionsSql
from stageline.ledger._sql_human import HumanSql, RoundMoved
from stageline.ledger._sql_leases import LeaseSql
from stageline.ledger._sql_staging import StagingSql, _noop
from stageline.ledger._sql_statements import (
    DELETE_RUN,
    INSERT_VERSION,
    SELECT_EVENTS,
    SELECT_NODES,
    SELECT_RUN,
    SELECT_VERSION,
)
from stageline.ledger._threads import ThreadsSql
from stageline.ledger._tokens_sql import TokensSql
from stageline.ledger.records import (
    Event,
    NodeRecord,
    Run,
    RunStatus,
)
from stageline.names import check_run_id

__all__ = ["Check", "Executor", "Op", "SqlLedger"]  # the executor's types, for the backends


class SqlLedger(
    LeaseSql,
    StagingSql,
    ChatSql,
    HumanSql,
    OutcomesSql,
    OutcomeStatsSql,
    OutboxSql,
    LineageSql,
    TokensSql,
    SessionsSql,
    RunSearchSql,
    ThreadsSql,
    AssistantsSql,
    CronsSql,
):
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
        self._upsert = upsert
        self._compiled: dict[int, tuple[ClauseElement, str]] = {}
        self._compiled_text: dict[tuple[Any, ...], str] = {}
        self._staged_nodes: dict[tuple[str, str, int, int], NodeRecord] = {}
        self._staged_events: list[Event] = []
        self._staged_outcomes: dict[tuple[str, str, int, int], Outcome] = {}
        self._staged_writes: list[Op] = []
        """Checkpoint writes waiting for the step's checkpoint (see ``commit_writes``)."""
        self._groups = CommitGroups()
        """Checkpoint commits queued for the connection (see ``commit_with_staged``)."""
        self._running: dict[str, set[tuple[str, int, int]]] = {}
        """Run -> its nodes whose latest staged record says running (task, attempt, try)."""
        self._seq: dict[str, int] = {}
        """Last event seq of each run whose lease this process holds (see _write_events)."""
        self._flush_handle: asyncio.TimerHandle | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        """The loop this ledger writes on: a sync stage's thread hands its flush to it."""
        self._flush_task: asyncio.Task[None] | None = None
        self.publisher: Publisher | None = None
        self.url = url
        self._cancel_watch: dict[str, Callable[[], None]] = {}
        """Runs advanced here whose cancel flag each checkpoint commit reads (see cancel_check)."""
        self._unsaved: set[str] = set()
        """Runs advanced here that have no checkpoint yet (see ``expect_no_checkpoint``)."""

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
        async with self._lock:
            seqs = dict(self._seq)
            try:
                yield self._x
            except BaseException:
                self._seq = seqs
                await self._x.rollback()
                raise
            # Not restored if the COMMIT fails: it may have committed (a cancellation is raised
            # after the round trip's end), and a seq used twice would collide; one skipped is not.
            await self._x.commit()  # on Postgres it may carry the block's writes

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Executor]:
        async with self._lock:
            yield self._x

    @asynccontextmanager
    async def _autocommit(self) -> AsyncIterator[Executor]:
        """A block of one write statement (its own transaction) that touches nothing this
        process keeps (event numbers, staged rows). Here a transaction like any other; Postgres
        sends it alone on a connection of its own, beside the ledger's lock."""
        async with self._tx() as x:
            yield x

    async def _lock_schema(self, x: Executor) -> None:
        """Take the database's write lock for a migration's check-and-apply (a backend's part:
        processes that start at once on an empty database must agree on who migrates)."""

    async def setup(self) -> None:
        """Apply pending migrations, under the database's write lock."""
        dialect = self._x.dialect
        async with self._tx() as x:
            await self._lock_schema(x)
            for stmt in _ddl(schema_version, dialect):
                await x.execute(stmt, {})
            [row] = await x.fetch(self._sql(SELECT_VERSION), {})  # max(): always one row
            current = row["v"] or 0
            for number, migration in enumerate(MIGRATIONS, start=1):
                if number <= current:
                    continue
                for stmt in migration(dialect):
                    await x.execute(stmt, {})
                await x.execute(
                    self._sql(INSERT_VERSION), {"version": number, "applied_at": time.time()}
                )

    _LEGACY_CHECKPOINTS = ""
    """A backend's query: one row if LangGraph's checkpoint tables (the release before
    stageline's own store) are in the database."""

    _RECLAIM: tuple[str, ...] = ()
    """A backend's statements that give the space of deleted rows back (``prune --vacuum``),
    run outside any transaction."""
    _SIZE = ""
    """A backend's query for the database's size in bytes (one row, one column)."""

    async def legacy_checkpoints(self) -> bool:
        """Whether the database still holds LangGraph's checkpoint tables (``db upgrade``
        converts them)."""
        if not self._LEGACY_CHECKPOINTS:
            return False
        async with self._read() as x:
            return bool(await x.fetch(self._LEGACY_CHECKPOINTS, {}))

    async def schema_version(self) -> int:
        async with self._read() as x:
            [row] = await x.fetch(self._sql(SELECT_VERSION), {})  # max(): always one row
        return int(row["v"] or 0)

    # -- runs -------------------------------------------------------------------------------

    async def create_run(
        self, run: Run, *, events: Iterable[Event] = (), lineage: Lineage | None = None
    ) -> Run:
        """Insert a run (created leased when ``run.lease_holder`` is set) with its first events
        (and, for a fork, where it came from)."""
        check_run_id(run.run_id)
        async with self._tx() as x:
            if not await x.execute(self._sql(self._insert_run), run.to_row()):
                raise InvalidTransition(f"run {run.run_id} already exists")
            await self._insert_lineage(x, lineage)
            if run.lease_holder:
                self._seq[run.run_id] = run.last_seq
            written = await self._write_events(x, run.run_id, list(events))
        self._publish(written)
        return run

    async def get_run(self, run_id: str) -> Run:
        check_run_id(run_id)  # every runner method reads its run first: a name, never a path
        async with self._read() as x:
            rows = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
        if not rows:
            raise RunNotFound(run_id)
        return Run.from_row(rows[0])

    async def list_runs(
        self,
        *,
        status: str | None = None,
        template: str | None = None,
        limit: int = 100,
        updated_before: float | None = None,
    ) -> list[Run]:
        stmt = select(runs)
        if status:
            stmt = stmt.where(runs.c.status == status)
        if updated_before is not None:  # retention: runs idle since then
            stmt = stmt.where(runs.c.updated_at < updated_before)
        if template:
            stmt = stmt.where(runs.c.template == template)
        stmt = stmt.order_by(runs.c.created_at.desc()).limit(limit)
        compiled = stmt.compile(dialect=self._x.dialect)
        async with self._read() as x:
            rows = await x.fetch(str(compiled), compiled.params)
        return [Run.from_row(r) for r in rows]

    async def transition(
        self,
        run_id: str,
        status: RunStatus,
        *,
        events: Iterable[Event] = (),
        expect: Iterable[RunStatus] | None = None,
        release: bool = False,
        cancel_wins: Iterable[Event] | None = None,
        lease: tuple[str, float] | None = None,
        **fields: Any,
    ) -> Run:
        """Set a run's status (and fields) and append events, in one transaction.

        Staged writes go first, so a terminal event always follows the node records it sums up.
        ``expect`` refuses the change unless the run is in one of those statuses; ``release``
        gives up this process's lease in the same transaction. With ``cancel_wins``, a cancel
        requested before this commit wins: the run ends ``cancelled`` with those events instead
        (the flag and this change are one compare-and-set, so no cancel is ever dropped).
        ``lease=(holder, ttl)`` takes the run's lease first, in the same transaction, as
        ``acquire_lease`` does (``LeaseHeld``, and nothing changed, if a live holder has it).
        """
        return await self._transition(
            run_id,
            status,
            events=events,
            expect=expect,
            release=release,
            cancel_wins=cancel_wins,
            lease=lease,
            fields=fields,
        )

    async def end_advance(
        self,
        run_id: str,
        status: RunStatus,
        *,
        waits: WaitChanges,
        events: Iterable[Event] = (),
        expect: Iterable[RunStatus] | None = None,
        release: bool = False,
        cancel_wins: Iterable[Event] | None = None,
        **fields: Any,
    ) -> Run | None:
        """``transition``, with what the advance did to the run's waits in the same transaction
        (the rounds' events go after the staged ones, before ``events``). None, and nothing
        changed, when a round to settle was no longer ``decided``: someone moved it meanwhile,
        so the caller settles round by round (``settle_wait``) and looks again."""
        try:
            return await self._transition(
                run_id,
                status,
                events=events,
                expect=expect,
                release=release,
                cancel_wins=cancel_wins,
                lease=None,
                fields=fields,
                waits=waits,
            )
        except RoundMoved:
            return None

    async def _transition(
        self,
        run_id: str,
        status: RunStatus,
        *,
        events: Iterable[Event],
        expect: Iterable[RunStatus] | None,
        release: bool,
        cancel_wins: Iterable[Event] | None,
        lease: tuple[str, float] | None,
        fields: dict[str, Any],
        waits: WaitChanges | None = None,
    ) -> Run:
        values = {**fields, "status": str(status), "updated_at": time.time()}
        if release:
            values.update(lease_holder=None, lease_expires_at=None)
        allowed = [str(s) for s in expect] if expect is not None else None
        undo, seqs = _noop, dict(self._seq)
        try:
            async with self._tx() as x:
                if lease is not None:
                    await self._lease_in(x, run_id, *lease)
                # Before the staged rows are taken: a round found moved rolls back, nothing lost.
                said = await self._change_waits(x, run_id, waits) if waits else []
                evs = said + list(events)
                staged, undo = await self._write_staged(x)
                rows = await self._update_run(
                    x,
                    run_id,
                    values,
                    allowed,
                    evs,
                    release,
                    unless_cancelled=cancel_wins is not None,
                )
                if not rows and cancel_wins is not None:
                    evs = said + list(cancel_wins)
                    values = {
                        "status": str(RunStatus.CANCELLED),
                        "updated_at": values["updated_at"],
                        "finished_at": values["updated_at"],
                    }
                    if release:
                        values.update(lease_holder=None, lease_expires_at=None)
                    rows = await self._update_run(x, run_id, values, allowed, evs, release)
                if not rows:
                    found = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
                    if not found:
                        raise RunNotFound(run_id)
                    raise InvalidTransition(
                        f"run {run_id} is {found[0]['status']}; cannot make it {status}"
                    )
                written = await self._write_events(x, run_id, evs)
        except BaseException:
            undo()  # not committed: the staged rows wait for the next commit, as if never taken
            self._seq = seqs
            raise
        if release:
            self._seq.pop(run_id, None)
            self._running.pop(run_id, None)
        self._publish(staged + written)
        run = Run.from_row(rows[0])
        # The row was read before its events were numbered (by a counter or a later UPDATE).
        if written and written[-1].seq > run.last_seq:
            run = replace(run, last_seq=written[-1].seq)
        return run

    async def _update_run(
        self,
        x: Executor,
        run_id: str,
        values: dict[str, Any],
        allowed: list[str] | None,
        evs: list[Event],
        release: bool,
        *,
        unless_cancelled: bool = False,
    ) -> list[dict[str, Any]]:
        if release and run_id in self._seq:  # the events written next, by this lease's counter
            values = {**values, "last_seq": self._seq[run_id] + len(evs)}
        params = {**values, "_run_id": run_id}
        params.update({f"_expect_{i}": s for i, s in enumerate(allowed or ())})
        if unless_cancelled:
            params["_no_cancel"] = False
        sql = self._transition_sql(
            tuple(sorted(values)), len(allowed or ()), allowed is not None, unless_cancelled
        )
        return await x.fetch(sql, params)

    def _transition_sql(
        self,
        fields: tuple[str, ...],
        n_expect: int,
        expecting: bool,
        unless_cancelled: bool,
    ) -> str:
        """The UPDATE ... RETURNING for these fields, compiled once (compiling is slow)."""
        key = ("transition", fields, n_expect, expecting, unless_cancelled)
        sql = self._compiled_text.get(key)
        if sql is None:
            stmt = update(runs).where(runs.c.run_id == bindparam("_run_id"))
            if unless_cancelled:
                stmt = stmt.where(runs.c.cancel_requested == bindparam("_no_cancel"))
            if expecting:
                stmt = stmt.where(
                    or_(
                        false(),
                        *(runs.c.status == bindparam(f"_expect_{i}") for i in range(n_expect)),
                    )
                )
            stmt = stmt.values(**{f: bindparam(f) for f in fields}).returning(*runs.c)
            sql = str(stmt.compile(dialect=self._x.dialect))
            self._compiled_text[key] = sql
        return sql

    # -- node records and events ------------------------------------------------------------

    async def append_events(self, run_id: str, evs: Iterable[Event]) -> list[Event]:
        """Write events now, in their own transaction."""
        async with self._tx() as x:
            written = await self._write_events(x, run_id, list(evs))
        self._publish(written)
        return written

    async def node_records(self, run_id: str) -> list[NodeRecord]:
        async with self._read() as x:
            rows = await x.fetch(self._sql(SELECT_NODES), {"run_id": run_id})
        return [NodeRecord.from_row(r) for r in rows]

    async def events(
        self, run_id: str, *, after: int = 0, categories: Iterable[str] | None = None
    ) -> list[Event]:
        async with self._read() as x:
            rows = await x.fetch(self._sql(SELECT_EVENTS), {"run_id": run_id, "after": after})
        found = [Event.from_row(r) for r in rows]
        if categories is not None:
            wanted = set(categories)
            found = [e for e in found if e.category in wanted]
        return found

    async def delete_run(self, run_id: str) -> None:
        async with self._tx() as x:
            for stmt in DELETE_RUN:
                await x.execute(self._sql(stmt), {"run_id": run_id})


def _ddl(table: Any, dialect: Dialect) -> list[str]:
    from sqlalchemy.schema import CreateTable

    return [str(CreateTable(table, if_not_exists=True).compile(dialect=dialect))]
