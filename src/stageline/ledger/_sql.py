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
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    delete,
    exists,
    false,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.sql import ClauseElement

from stageline.errors import InvalidTransition, LeaseHeld, RunNotFound
from stageline.ledger._base import Publisher, holder_is_dead
from stageline.ledger._chat import ChatSql
from stageline.ledger._executor import Check, Executor, Op
from stageline.ledger._human import WaitChanges
from stageline.ledger._lineage import Lineage, LineageSql
from stageline.ledger._outbox import OutboxSql
from stageline.ledger._outcome_stats import OutcomeStatsSql
from stageline.ledger._outcomes import Outcome, OutcomesSql
from stageline.ledger._schema import (
    MIGRATIONS,
    api_runs,
    checkpoints,
    effects,
    events,
    lineage,
    node_records,
    runs,
    schema_version,
    sink_cursors,
    thread_meta,
    waits,
)
from stageline.ledger._search import RunSearchSql
from stageline.ledger._sessions import SessionsSql
from stageline.ledger._sql_human import HumanSql, RoundMoved
from stageline.ledger._threads import ThreadsSql
from stageline.ledger._tokens_sql import TokensSql
from stageline.ledger.records import (
    Claimed,
    Event,
    NodeRecord,
    NodeStatus,
    Run,
    RunClaim,
    RunStatus,
)
from stageline.names import check_run_id

__all__ = ["Check", "Executor", "Op", "SqlLedger"]  # the executor's types, for the backends

FLUSH_DELAY = 0.15


class SqlLedger(
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
            await self._x.commit()

    @asynccontextmanager
    async def _read(self) -> AsyncIterator[Executor]:
        async with self._lock:
            yield self._x

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
            rows = await x.fetch(self._sql(_SELECT_VERSION), {})
        return int(rows[0]["v"] or 0) if rows else 0

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
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
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
                    await self._take_lease(x, run_id, *lease)
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
                    found = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
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
        return Run.from_row(rows[0])

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
        unless_cancelled: bool = False,
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

    async def claim(self, run_id: str, claim: RunClaim | Callable[[Run], RunClaim]) -> Claimed:
        """Take the run's lease to advance it, as ``claim`` says (``LeaseHeld`` or
        ``InvalidTransition``, and nothing changed, if refused), and read what the advance
        needs of the run in the same transaction. A callable is given the run as read in that
        transaction and says how to claim it (what it raises refuses the claim)."""
        async with self._tx() as x:
            if not isinstance(claim, RunClaim):
                rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
                if not rows:
                    raise RunNotFound(run_id)
                claim = claim(Run.from_row(rows[0]))
            claimed = await self._claimed_in(x, run_id, claim)
            written = await self._write_events(x, run_id, list(claim.events))
        self._publish(written)
        return claimed

    async def _claimed_in(self, x: Executor, run_id: str, claim: RunClaim) -> Claimed:
        """``_claim_in``, then whether the run has a checkpoint and (if so) its records."""
        run = await self._claim_in(x, run_id, claim)
        found = await x.fetch(self._sql(_HAS_CHECKPOINT), {"run_id": run_id})
        if not (found and found[0]["found"]):
            return Claimed(run=run, saved=False)
        rows = await x.fetch(self._sql(_SELECT_NODES), {"run_id": run_id})
        return Claimed(run=run, saved=True, records=tuple(NodeRecord.from_row(r) for r in rows))

    async def _claim_in(self, x: Executor, run_id: str, claim: RunClaim) -> Run:
        """``claim``'s lease and status change, in the caller's transaction (its events are the
        caller's to write); ``LeaseHeld`` or ``InvalidTransition`` if refused."""
        await self._take_lease(x, run_id, claim.holder, claim.ttl)
        values = {**claim.fields, "status": str(claim.status), "updated_at": time.time()}
        allowed = [str(s) for s in claim.expect]
        rows = await self._update_run(x, run_id, values, allowed, [], False)
        if not rows:
            found = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
            raise InvalidTransition(
                f"run {run_id} is {found[0]['status'] if found else 'gone'}; "
                f"cannot make it {claim.status}"
            )
        return Run.from_row(rows[0])

    async def request_cancel(self, run_id: str) -> Run:
        """Flag a run that has not ended for cancelling; ``InvalidTransition`` if it has."""
        async with self._tx() as x:
            done = await x.execute(
                self._sql(_REQUEST_CANCEL),
                {
                    "run_id": run_id,
                    "now": time.time(),
                    "flag": True,
                    **{f"t{i}": str(s) for i, s in enumerate(_TERMINAL)},
                },
            )
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
        if not rows:
            raise RunNotFound(run_id)
        run = Run.from_row(rows[0])
        if not done:
            raise InvalidTransition(f"run {run_id} already {run.status}")
        return run

    def watch_cancel(self, run_id: str, on_cancel: Callable[[], None] | None) -> None:
        """Read the run's cancel flag with every checkpoint commit of this process and call
        ``on_cancel`` once it is set; None stops watching."""
        if on_cancel is None:
            self._cancel_watch.pop(run_id, None)
        else:
            self._cancel_watch[run_id] = on_cancel

    def expect_no_checkpoint(self, run_id: str, unsaved: bool = True) -> None:
        """Say that a run this process holds the lease of has no checkpoint yet (it was made
        under the lease, or found without one since): the saver answers the next read of its
        latest checkpoint without a query. False forgets it (the advance is over)."""
        if unsaved:
            self._unsaved.add(run_id)
        else:
            self._unsaved.discard(run_id)

    def known_unsaved(self, run_id: str) -> bool:
        """Whether ``run_id`` has no checkpoint, as ``expect_no_checkpoint`` said; said once
        (the read that asks is the advance's first, and a checkpoint follows it)."""
        if run_id in self._unsaved:
            self._unsaved.discard(run_id)
            return True
        return False

    def cancel_check(self) -> Check | None:
        """The statement a backend runs after a checkpoint commit, once per watched run id (in
        the same round trip), or None when nothing is watched."""
        if not self._cancel_watch:
            return None
        return self._sql(_CANCEL_FLAG), list(self._cancel_watch)

    def cancels_seen(self, run_ids: Iterable[str]) -> None:
        """The runs ``cancel_check`` found flagged: tell whoever watches them."""
        for run_id in run_ids:
            on_cancel = self._cancel_watch.pop(run_id, None)
            if on_cancel is not None:
                on_cancel()

    async def cancel_requested(self, run_id: str) -> bool:
        """Whether a cancel was requested for the run (one indexed read)."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_CANCEL_FLAG), {"run_id": run_id})
        return bool(rows and rows[0]["cancel_requested"])

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, holder: str, ttl: float) -> Run:
        """Take the run's lease atomically, or raise ``LeaseHeld`` naming the live holder."""
        async with self._tx() as x:
            return await self._take_lease(x, run_id, holder, ttl)

    async def _take_lease(self, x: Executor, run_id: str, holder: str, ttl: float) -> Run:
        """The lease, taken in the caller's transaction (``LeaseHeld`` if a live holder has it)."""
        now = time.time()
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
                {
                    "run_id": run_id,
                    "holder": holder,
                    "expires": now + ttl,
                    "old": current.lease_holder,
                },
            )
            rows = await x.fetch(self._sql(_SELECT_RUN), {"run_id": run_id})
            current = Run.from_row(rows[0])
        if count:
            found = await x.fetch(self._sql(_MAX_SEQ), {"run_id": run_id})
            self._seq[run_id] = int(found[0]["s"] or 0)
        if count == 0:
            raise LeaseHeld(
                run_id,
                current.lease_holder or "?",
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
            await self._store_seq(x, run_id)
            await x.execute(
                self._sql(_RELEASE_LEASE),
                {"run_id": run_id, "holder": holder, "none_holder": None, "none_expires": None},
            )
        self._seq.pop(run_id, None)
        self._running.pop(run_id, None)

    # -- node records and events ------------------------------------------------------------

    def stage_node(self, record: NodeRecord) -> None:
        """Queue a node record; it is written with the next checkpoint (or flush)."""
        key = (record.run_id, record.task_id, record.attempt, record.try_no)
        self._staged_nodes[key] = record
        running = self._running.setdefault(record.run_id, set())
        if record.status is NodeStatus.RUNNING:
            running.add(key[1:])
        else:
            running.discard(key[1:])
            if not running:
                del self._running[record.run_id]
        self._schedule_flush()

    def stage_event(self, event: Event) -> None:
        """Queue an event; it is written with the next checkpoint (or flush)."""
        self._staged_events.append(event)
        self._schedule_flush()

    def _schedule_flush(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            # A sync stage's worker thread: its log lines are flushed on the ledger's loop.
            if self._loop is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._schedule_flush)
            return
        self._loop = loop
        if self._flush_handle is None:
            self._flush_handle = loop.call_later(FLUSH_DELAY, self._start_flush)

    def _start_flush(self) -> None:
        self._flush_handle = None
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.ensure_future(self.flush())

    async def flush(self) -> None:
        """Commit staged writes now."""
        if not self.has_staged:
            return
        undo, seqs = _noop, dict(self._seq)
        try:
            async with self._tx() as x:
                written, undo = await self._write_staged(x)
        except BaseException:
            undo()  # not committed: the rows wait for the next commit
            self._seq = seqs
            raise
        self._publish(written)

    @property
    def has_staged(self) -> bool:
        """Whether anything waits to be committed (``flush`` commits it)."""
        return bool(
            self._staged_nodes
            or self._staged_events
            or self._staged_outcomes
            or self._staged_writes
        )

    @property
    def has_staged_writes(self) -> bool:
        """Whether checkpoint writes wait for a commit (a read of checkpoints flushes first)."""
        return bool(self._staged_writes)

    async def commit_writes(self, ops: Sequence[Op], run_id: str) -> None:
        """A task's pending checkpoint writes: staged for the step's checkpoint commit when the
        run is advanced here (``watch_cancel``: the runner flushes when its graph stops) and no
        other node of it is running, else committed now (with what is staged).

        Staged writes are committed by the next commit of any kind (the checkpoint LangGraph
        saves next, a transition, ``flush``), at the latest ``FLUSH_DELAY`` later.
        """
        if run_id not in self._cancel_watch or self._running.get(run_id):
            await self.commit_with_staged(ops)
            return
        self._staged_writes.extend((sql, list(rows)) for sql, rows in ops)
        self._schedule_flush()

    @property
    def lock(self) -> asyncio.Lock:
        """Serializes statements on the connection the ledger shares with the saver."""
        return self._lock

    def take_staged(self) -> tuple[list[Op], list[Event], Callable[[], None]]:
        """Hand staged rows to a commit that is about to happen: ``(ops, events, undo)``.

        The backend's checkpoint connection calls this just before it commits, so the rows land
        in the checkpoint's own transaction; ``undo`` puts them back if that commit fails. Only
        runs whose lease this process holds are numbered here (no statement needed); others
        stay staged for ``flush``.
        """
        nodes = list(self._staged_nodes.values())
        mine = [ev for ev in self._staged_events if ev.run_id in self._seq]
        outs = list(self._staged_outcomes.values())
        writes = self._staged_writes
        if not nodes and not mine and not outs and not writes:
            return [], [], _noop
        others = [ev for ev in self._staged_events if ev.run_id not in self._seq]
        saved_nodes, saved_events = self._staged_nodes, self._staged_events
        saved_seq = dict(self._seq)
        saved_outs = self._staged_outcomes
        self._staged_nodes, self._staged_events, self._staged_outcomes = {}, others, {}
        self._staged_writes = []
        if self._flush_handle is not None and not others:
            self._flush_handle.cancel()
            self._flush_handle = None
        ops: list[Op] = list(writes)
        if nodes:
            ops.append((self._sql(self._node_upsert), [n.to_row() for n in nodes]))
        ops += self._outcome_ops(outs)
        by_run: dict[str, list[Event]] = {}
        for ev in mine:
            by_run.setdefault(ev.run_id, []).append(ev)
        written: list[Event] = []
        for run_id, evs in by_run.items():
            written += self._number(run_id, evs)
        if written:
            ops.append((self._sql(_INSERT_EVENTS), [ev.to_row() for ev in written]))

        def undo() -> None:
            self._staged_writes = writes + self._staged_writes
            self._staged_nodes = {**saved_nodes, **self._staged_nodes}
            self._staged_outcomes = {**saved_outs, **self._staged_outcomes}
            self._staged_events = saved_events + [
                e for e in self._staged_events if e not in saved_events
            ]
            self._seq = saved_seq

        return ops, written, undo

    async def commit_with_staged(self, ops: Sequence[Op]) -> None:
        """Commit ``ops`` (a checkpoint's rows) together with the staged ledger rows: one
        transaction, one commit, one round trip; then tell the watchers of runs flagged for
        cancelling. So a node's record is durable exactly when the checkpoint that marks the
        node done is."""
        async with self._lock:
            staged, written, undo = self.take_staged()
            try:
                flagged = await self._x.write_and_commit([*ops, *staged], self.cancel_check())
            except BaseException:
                undo()
                raise
        self._publish(written)
        self.cancels_seen(flagged)

    async def _write_staged(self, x: Executor) -> tuple[list[Event], Callable[[], None]]:
        """Write the staged rows in ``x``'s transaction; returns the events written and what
        puts the rows back in the stage should that transaction not commit."""
        ops, written, undo = self.take_staged()
        try:
            await x.execute_batch(ops)
            rest = self._staged_events
            self._staged_events = []
            by_run: dict[str, list[Event]] = {}
            for ev in rest:
                by_run.setdefault(ev.run_id, []).append(ev)
            for run_id, evs in by_run.items():
                written = written + await self._write_events(x, run_id, evs)
        except BaseException:
            undo()
            raise
        return written, undo

    async def _write_events(self, x: Executor, run_id: str, evs: list[Event]) -> list[Event]:
        """Number and insert events. The lease holder numbers its runs' events from a counter
        (no extra statement on the hot path); anyone else numbers them after the highest seq
        written, under the run row's lock."""
        if not evs:
            return []
        if run_id in self._seq:
            numbered = self._number(run_id, evs)
        else:
            rows = await x.fetch(self._sql(_BUMP_SEQ), {"run_id": run_id, "n": len(evs)})
            if not rows:
                raise RunNotFound(run_id)
            first = int(rows[0]["last_seq"]) - len(evs) + 1
            numbered = [_with_seq(ev, first + i) for i, ev in enumerate(evs)]
        await x.execute_many(self._sql(_INSERT_EVENTS), [ev.to_row() for ev in numbered])
        return numbered

    def _number(self, run_id: str, evs: list[Event]) -> list[Event]:
        first = self._seq[run_id] + 1
        self._seq[run_id] += len(evs)
        return [_with_seq(ev, first + i) for i, ev in enumerate(evs)]

    async def _store_seq(self, x: Executor, run_id: str) -> None:
        if run_id in self._seq:
            await x.execute(self._sql(_SET_SEQ), {"run_id": run_id, "seq": self._seq[run_id]})

    @property
    def _insert_run(self) -> Any:
        stmt = self.__dict__.get("_insert_run_stmt")
        if stmt is None:
            stmt = self._upsert(runs).on_conflict_do_nothing(index_elements=["run_id"])
            self.__dict__["_insert_run_stmt"] = stmt
        return stmt

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
                set_={
                    c: base.excluded[c]
                    for c in ("status", "finished_at", "metrics", "error", "failure_phase")
                },
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
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_NODES), {"run_id": run_id})
        return [NodeRecord.from_row(r) for r in rows]

    async def events(
        self, run_id: str, *, after: int = 0, categories: Iterable[str] | None = None
    ) -> list[Event]:
        async with self._read() as x:
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


def _noop() -> None:
    return None


def _with_seq(ev: Event, seq: int) -> Event:
    # Events handed to the ledger are unnumbered until written: number them in place (a
    # dataclasses.replace per event showed up on the hot path); copy one already numbered.
    if ev.seq:
        from dataclasses import replace

        return replace(ev, seq=seq)
    object.__setattr__(ev, "seq", seq)
    return ev


def _ddl(table: Any, dialect: Dialect) -> list[str]:
    from sqlalchemy.schema import CreateTable

    return [str(CreateTable(table, if_not_exists=True).compile(dialect=dialect))]


_INSERT_VERSION = insert(schema_version)
_INSERT_EVENTS = insert(events)
_DELETE_RUN = tuple(
    delete(t).where(t.c.run_id == bindparam("run_id"))
    for t in (
        events,
        node_records,
        waits,
        effects,
        sink_cursors,
        lineage,
        thread_meta,
        api_runs,
        runs,
    )
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
_MAX_SEQ = select(func.coalesce(func.max(events.c.seq), literal_column("0")).label("s")).where(
    events.c.run_id == bindparam("run_id")
)
_BUMP_SEQ = (
    update(runs)
    .where(runs.c.run_id == bindparam("run_id"))
    .values(last_seq=_MAX_SEQ.scalar_subquery() + bindparam("n"))
    .returning(runs.c.last_seq)
)
_SET_SEQ = (
    update(runs).where(runs.c.run_id == bindparam("run_id")).values(last_seq=bindparam("seq"))
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
_TERMINAL = [s for s in RunStatus if s.terminal]
_REQUEST_CANCEL = (
    update(runs)
    .where(
        and_(
            runs.c.run_id == bindparam("run_id"),
            runs.c.status.not_in([bindparam(f"t{i}") for i in range(len(_TERMINAL))]),
        )
    )
    .values(cancel_requested=bindparam("flag"), updated_at=bindparam("now"))
)
_HAS_CHECKPOINT = select(
    exists()
    .where(
        and_(
            checkpoints.c.thread_id == bindparam("run_id"),
            checkpoints.c.checkpoint_ns == literal_column("''"),
        )
    )
    .label("found")
)
_CANCEL_FLAG = select(runs.c.cancel_requested).where(runs.c.run_id == bindparam("run_id"))
