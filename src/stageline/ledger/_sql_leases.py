"""The ledger's leases and claims over SQL: who advances a run, and its cancel flag.

A run is advanced by the one process that holds its lease (renewed while it runs; a dead
holder's lease on this host is taken at once). A claim takes the lease and moves the run's
status in one transaction. The lease holder numbers its run's events itself (``_seq``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from stageline.errors import InvalidTransition, LeaseHeld, RunNotFound
from stageline.ledger._base import holder_is_dead
from stageline.ledger._executor import Check, Executor
from stageline.ledger._sql_statements import (
    CANCEL_FLAG,
    HAS_CHECKPOINT,
    MAX_SEQ,
    RELEASE_LEASE,
    RENEW_LEASE,
    REQUEST_CANCEL,
    SELECT_NODES,
    SELECT_RUN,
    STEAL_LEASE,
    TAKE_LEASE,
    TERMINAL,
    cancels_flagged,
)
from stageline.ledger.records import Claimed, Event, NodeRecord, Run, RunClaim

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from sqlalchemy.sql import ClauseElement

__all__ = ["LeaseSql"]


class LeaseSql:
    """Mixed into ``SqlLedger``: uses its transactions, statements and event numbering."""

    if TYPE_CHECKING:
        _seq: dict[str, int]
        _running: dict[str, set[tuple[str, int, int]]]
        _cancel_watch: dict[str, Callable[[], None]]
        _unsaved: set[str]

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: ClauseElement) -> str: ...
        async def _write_events(
            self, x: Executor, run_id: str, evs: list[Event]
        ) -> list[Event]: ...
        def _publish(self, written: list[Event]) -> None: ...
        async def _store_seq(self, x: Executor, run_id: str) -> None: ...
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
        ) -> list[dict[str, Any]]: ...

    async def claim(self, run_id: str, claim: RunClaim | Callable[[Run], RunClaim]) -> Claimed:
        """Take the run's lease to advance it, as ``claim`` says (``LeaseHeld`` or
        ``InvalidTransition``, and nothing changed, if refused), and read what the advance
        needs of the run in the same transaction. A callable is given the run as read in that
        transaction and says how to claim it (what it raises refuses the claim)."""
        async with self._tx() as x:
            if not isinstance(claim, RunClaim):
                rows = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
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
        found = await x.fetch(self._sql(HAS_CHECKPOINT), {"run_id": run_id})
        if not (found and found[0]["found"]):
            return Claimed(run=run, saved=False)
        rows = await x.fetch(self._sql(SELECT_NODES), {"run_id": run_id})
        return Claimed(run=run, saved=True, records=tuple(NodeRecord.from_row(r) for r in rows))

    async def _claim_in(self, x: Executor, run_id: str, claim: RunClaim) -> Run:
        """``claim``'s lease and status change, in the caller's transaction (its events are the
        caller's to write); ``LeaseHeld`` or ``InvalidTransition`` if refused."""
        await self._lease_in(x, run_id, claim.holder, claim.ttl)
        values = {**claim.fields, "status": str(claim.status), "updated_at": time.time()}
        allowed = [str(s) for s in claim.expect]
        rows = await self._update_run(x, run_id, values, allowed, [], False)
        if not rows:
            found = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
            raise InvalidTransition(
                f"run {run_id} is {found[0]['status'] if found else 'gone'}; "
                f"cannot make it {claim.status}"
            )
        return Run.from_row(rows[0])

    async def request_cancel(self, run_id: str) -> Run:
        """Flag a run that has not ended for cancelling; ``InvalidTransition`` if it has."""
        async with self._tx() as x:
            done = await x.execute(
                self._sql(REQUEST_CANCEL),
                {
                    "run_id": run_id,
                    "now": time.time(),
                    "flag": True,
                    **{f"t{i}": str(s) for i, s in enumerate(TERMINAL)},
                },
            )
            rows = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
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
        """The query a backend runs in a checkpoint's transaction, before its commit (in the
        same round trip): which watched runs are flagged, all in one statement. None when
        nothing is watched."""
        if not self._cancel_watch:
            return None
        stmt, params = cancels_flagged(list(self._cancel_watch))
        return self._sql(stmt), params

    def cancels_seen(self, run_ids: Iterable[str]) -> None:
        """The runs ``cancel_check`` found flagged: tell whoever watches them."""
        for run_id in run_ids:
            on_cancel = self._cancel_watch.pop(run_id, None)
            if on_cancel is not None:
                on_cancel()

    async def cancel_requested(self, run_id: str) -> bool:
        """Whether a cancel was requested for the run (one indexed read)."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(CANCEL_FLAG), {"run_id": run_id})
        return bool(rows and rows[0]["cancel_requested"])

    # -- leases -----------------------------------------------------------------------------

    async def acquire_lease(self, run_id: str, holder: str, ttl: float) -> Run:
        """Take the run's lease atomically, or raise ``LeaseHeld`` naming the live holder."""
        async with self._tx() as x:
            return await self._take_lease(x, run_id, holder, ttl)

    async def _take_lease(self, x: Executor, run_id: str, holder: str, ttl: float) -> Run:
        """The lease, taken in the caller's transaction (``LeaseHeld`` if a live holder has it);
        the run as it stands then."""
        current = await self._lease_in(x, run_id, holder, ttl, read_back=True)
        assert current is not None  # read back when asked
        return current

    async def _lease_in(
        self, x: Executor, run_id: str, holder: str, ttl: float, *, read_back: bool = False
    ) -> Run | None:
        """The lease, taken in the caller's transaction (``LeaseHeld`` if a live holder has it).
        The run is read when the update matched nothing (to name the holder, or take a dead
        one's lease) and, with ``read_back``, after it; a caller that changes the run next in
        this transaction (and reads it from that change) needs no read of its own."""
        now = time.time()
        count = await x.execute(
            self._sql(TAKE_LEASE),
            {"run_id": run_id, "holder": holder, "expires": now + ttl, "now": now},
        )
        current: Run | None = None
        if count == 0 or read_back:
            rows = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
            if not rows:
                raise RunNotFound(run_id)
            current = Run.from_row(rows[0])
        if count == 0 and current and current.lease_holder and holder_is_dead(current.lease_holder):
            # Same host, process gone: its lease cannot be renewed, so take it now.
            count = await x.execute(
                self._sql(STEAL_LEASE),
                {
                    "run_id": run_id,
                    "holder": holder,
                    "expires": now + ttl,
                    "old": current.lease_holder,
                },
            )
            rows = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
            current = Run.from_row(rows[0])
        if count:
            found = await x.fetch(self._sql(MAX_SEQ), {"run_id": run_id})
            self._seq[run_id] = int(found[0]["s"] or 0)
        if count == 0:
            assert current is not None  # read above
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
                self._sql(RENEW_LEASE),
                {"run_id": run_id, "holder": holder, "expires": time.time() + ttl},
            )
            rows = await x.fetch(self._sql(SELECT_RUN), {"run_id": run_id})
        return Run.from_row(rows[0]) if count and rows else None

    async def release_lease(self, run_id: str, holder: str) -> None:
        async with self._tx() as x:
            await self._store_seq(x, run_id)
            await x.execute(
                self._sql(RELEASE_LEASE),
                {"run_id": run_id, "holder": holder, "none_holder": None, "none_expires": None},
            )
        self._seq.pop(run_id, None)
        self._running.pop(run_id, None)
