"""The ledger's staging and commit path over SQL: a step's rows ride in its checkpoint's commit.

Node records, events, outcomes and pending checkpoint writes are staged in memory and handed to
the next commit of any kind (``take_staged``): the saver's checkpoint, a transition, or
``flush``, at the latest ``FLUSH_DELAY`` after the first of them was staged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from stageline.errors import RunNotFound
from stageline.ledger._base import Publisher
from stageline.ledger._commit_groups import CommitGroups, Pending
from stageline.ledger._executor import Check, Executor, Op
from stageline.ledger._outcomes import Outcome
from stageline.ledger._schema import node_records, runs
from stageline.ledger._sql_statements import BUMP_SEQ, INSERT_EVENTS, SET_SEQ
from stageline.ledger.records import Event, NodeRecord, NodeStatus

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from sqlalchemy.sql import ClauseElement

__all__ = ["FLUSH_DELAY", "StagingSql"]

FLUSH_DELAY = 0.15
"""Seconds a staged row may wait for a commit before ``flush`` commits it on its own."""


class StagingSql:
    """Mixed into ``SqlLedger``: the staged rows are its own; the connection is shared."""

    if TYPE_CHECKING:
        _x: Executor
        _lock: asyncio.Lock
        _upsert: Callable[..., Any]
        _seq: dict[str, int]
        _running: dict[str, set[tuple[str, int, int]]]
        _cancel_watch: dict[str, Callable[[], None]]
        _staged_nodes: dict[tuple[str, str, int, int], NodeRecord]
        _staged_events: list[Event]
        _staged_outcomes: dict[tuple[str, str, int, int], Outcome]
        _staged_writes: list[Op]
        _groups: CommitGroups
        _flush_handle: asyncio.TimerHandle | None
        _loop: asyncio.AbstractEventLoop | None
        _flush_task: asyncio.Task[None] | None
        publisher: Publisher | None

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: ClauseElement) -> str: ...
        def _outcome_ops(self, rows: list[Outcome]) -> list[tuple[str, list[dict[str, Any]]]]: ...
        def cancel_check(self) -> Check | None: ...
        def cancels_seen(self, run_ids: Iterable[str]) -> None: ...

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
            ops.append((self._sql(INSERT_EVENTS), [ev.to_row() for ev in written]))

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
        node done is. Checkpoints that queued meanwhile ride in the same commit
        (``CommitGroups``): returns once a commit holds ``ops``."""
        pending = self._groups.join(ops)
        async with self._lock:
            if not pending.committed:
                await self._commit_group(self._groups.take(pending))

    async def _commit_group(self, group: list[Pending]) -> None:
        """Commit ``group`` (its leader first) with the staged rows. Should that fail, the
        others are given back (each commits alone when it gets the connection) and the
        leader's rows are tried alone, now."""
        staged, written, undo = self.take_staged()
        try:
            flagged = await self._x.write_and_commit(
                [*self._groups.ops(group), *staged], self.cancel_check()
            )
        except Exception:
            undo()
            if len(group) == 1:
                raise
            await self._commit_group(group[:1])
            return
        except BaseException:
            undo()
            raise
        self._groups.committed(group)
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
            rows = await x.fetch(self._sql(BUMP_SEQ), {"run_id": run_id, "n": len(evs)})
            if not rows:
                raise RunNotFound(run_id)
            first = int(rows[0]["last_seq"]) - len(evs) + 1
            numbered = [_with_seq(ev, first + i) for i, ev in enumerate(evs)]
        await x.execute_many(self._sql(INSERT_EVENTS), [ev.to_row() for ev in numbered])
        return numbered

    def _number(self, run_id: str, evs: list[Event]) -> list[Event]:
        first = self._seq[run_id] + 1
        self._seq[run_id] += len(evs)
        return [_with_seq(ev, first + i) for i, ev in enumerate(evs)]

    async def _store_seq(self, x: Executor, run_id: str) -> None:
        if run_id in self._seq:
            await x.execute(self._sql(SET_SEQ), {"run_id": run_id, "seq": self._seq[run_id]})

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
