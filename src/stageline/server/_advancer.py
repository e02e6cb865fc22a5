"""Advancing runs for the server, so that none is lost and none is advanced twice.

Each advance is a task of the server's own, tracked so that shutdown drains it (the run stops
after its current step and is queued again). Runs started without waiting go to the job queue
on Postgres (the server works it in-process, and so can any ``stageline worker``); on SQLite
the server advances them itself. After a crash, a run the dead process was advancing still
says ``running`` with a lease nobody renews: every few seconds, and at once on start-up, the
server resumes such runs (and on SQLite, queued ones). The run's lease in the ledger makes sure
only one process advances a run at a time, whoever else looks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

from stageline.errors import ConflictError, StagelineError
from stageline.ledger import Run, RunStatus, holder_is_dead
from stageline.runner import Runner, RunSummary
from stageline.worker import defer_run, ensure_queue_schema, is_postgres, queue_app, work_queue

__all__ = ["RECOVER_EVERY", "Advancer"]

_log = logging.getLogger("stageline.server")

T = TypeVar("T")

RECOVER_EVERY = 2.0
"""Seconds between two looks for runs left behind by a process that died."""
SWEEP_EVERY = 30.0
"""Seconds between two deadline sweeps (SQLite; on Postgres the queue's periodic task)."""
ADOPT_LIMIT = 1000
QUEUED_GRACE = 5.0
"""Seconds a queued run is left to the process that queued it (on SQLite) before another
server process behind the same database (``serve --workers``) adopts it."""


def orphaned(run: Run, now: float) -> bool:
    """A running run whose lease nobody holds or renews any more."""
    return run.status is RunStatus.RUNNING and (
        run.lease_holder is None
        or (run.lease_expires_at or 0) < now
        or holder_is_dead(run.lease_holder)
    )


class Advancer:
    """The server's background advances, and its watch for runs left behind."""

    def __init__(self, runner: Runner, *, recover_every: float = RECOVER_EVERY) -> None:
        self.runner = runner
        self.recover_every = recover_every
        self._runs: dict[str, asyncio.Task[RunSummary | None]] = {}
        self._work: set[asyncio.Future[Any]] = set()
        self._stopping = asyncio.Event()
        self._stack = contextlib.AsyncExitStack()
        self._background: list[asyncio.Task[None]] = []
        self._queue: Any = None

    @property
    def uses_queue(self) -> bool:
        return self._queue is not None

    async def start(self) -> None:
        url = self.runner.settings.database_url
        if is_postgres(url):
            await ensure_queue_schema(url)
            app = queue_app(url)
            await self._stack.enter_async_context(app.open_async())
            self._queue = app
            # Runs queued while no server or worker ran (or whose job was never deferred).
            for run in await self.runner.ledger.list_runs(
                status=str(RunStatus.QUEUED), limit=ADOPT_LIMIT
            ):
                await defer_run(app, run.run_id)
            self._background.append(
                asyncio.create_task(
                    work_queue(app, self.runner, self._stopping, name="stageline serve"),
                    name="stageline serve queue",
                )
            )
        self._background.append(asyncio.create_task(self._watch(), name="stageline recover"))

    async def aclose(self, timeout: float = 10.0) -> None:
        """Drain: every advance stops after its current step; then wait (bounded) for them."""
        self.runner.drain("server shutdown")
        self._stopping.set()
        pending = [*self._runs.values(), *self._work, *self._background]
        if pending:
            _done, late = await asyncio.wait(pending, timeout=timeout)
            for task in late:
                task.cancel()
        await self._stack.aclose()

    # -- advancing --------------------------------------------------------------------------

    async def queue(self, run_id: str) -> None:
        """Have a queued run advanced in the background (the job queue on Postgres)."""
        if self._queue is not None:
            await defer_run(self._queue, run_id)
        else:
            self.advance(run_id)

    def advance(self, run_id: str) -> asyncio.Task[RunSummary | None]:
        """Resume ``run_id`` in a task of its own, unless this server advances it already."""
        task = self._runs.get(run_id)
        if task is not None and not task.done():
            return task
        task = asyncio.create_task(self._resume(run_id), name=f"advance {run_id}")
        self._runs[run_id] = task

        def forget(done: asyncio.Task[RunSummary | None]) -> None:
            if self._runs.get(run_id) is done:
                del self._runs[run_id]

        task.add_done_callback(forget)
        return task

    async def run(self, work: Awaitable[T]) -> T:
        """Carry out one request's advance (a start, a decision, a retry), tracked for shutdown;
        a client that goes away does not cut it short."""
        future = asyncio.ensure_future(work)
        self._work.add(future)
        future.add_done_callback(self._work.discard)
        return await asyncio.shield(future)

    async def _resume(self, run_id: str) -> RunSummary | None:
        try:
            return await self.runner.resume(run_id)
        except ConflictError as exc:  # another process has it, or it moved on meanwhile
            _log.info("run %s not advanced here: %s", run_id, exc)
        except StagelineError as exc:
            _log.warning("could not advance run %s: %s", run_id, exc)
        except Exception:
            _log.exception("advancing run %s failed", run_id)
        return None

    # -- runs left behind -------------------------------------------------------------------

    async def recover(self) -> list[str]:
        """Resume runs nobody advances: orphaned running runs, and queued runs on SQLite."""
        ledger = self.runner.ledger
        now = time.time()
        found = [
            r
            for r in await ledger.list_runs(status=str(RunStatus.RUNNING), limit=ADOPT_LIMIT)
            if orphaned(r, now)
        ]
        if self._queue is None:
            found += [
                r
                for r in await ledger.list_runs(status=str(RunStatus.QUEUED), limit=ADOPT_LIMIT)
                if now - r.updated_at > QUEUED_GRACE
            ]
        taken = []
        for run in sorted(found, key=lambda r: r.created_at):
            if run.run_id not in self._runs and not self._stopping.is_set():
                self.advance(run.run_id)
                taken.append(run.run_id)
        return taken

    async def _watch(self) -> None:
        swept = time.monotonic()
        while not self._stopping.is_set():
            try:
                if self._queue is None:  # on Postgres the job queue's loop fires them
                    for run_id in await self.runner.schedules.fire_due():
                        self.advance(run_id)
                    await self.runner.forge_ci.poll_due()  # CI waits that ended go on
                taken = await self.recover()
                if taken:
                    _log.warning("resuming %d run(s) left behind: %s", len(taken), ", ".join(taken))
                if self._queue is None and time.monotonic() - swept > SWEEP_EVERY:
                    swept = time.monotonic()
                    await self.runner.sweep()
            except StagelineError:
                _log.warning("could not look for runs left behind", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.recover_every)
