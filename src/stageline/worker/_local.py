"""``stageline worker --local``: the one background worker of a SQLite project.

SQLite has no job queue to share, so one process per project home advances queued runs, oldest
first, up to ``concurrency`` at once (default 2: two agents side by side). It holds an
exclusive ``flock`` on ``HOME/worker.lock`` for its life: a second one exits at once, and
``run --detach`` starts one only when the lock is free. A worker with ``idle_exit`` leaves
after that long without work: it lets go of the lock *before* its last look for queued runs,
so a run queued meanwhile is never left behind (whoever queued it either saw the lock held,
and this last look finds the run, or saw it free and started a new worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import IO

from stageline.config import Settings, load_settings
from stageline.errors import LeaseHeld, StagelineError
from stageline.ledger import RunStatus
from stageline.names import is_run_id
from stageline.plaindata import shown
from stageline.runner import Runner

__all__ = ["DEFAULT_CONCURRENCY", "LOCK_FILE", "local_worker_alive", "run_local_worker"]

_log = logging.getLogger("stageline.worker")

LOCK_FILE = "worker.lock"
DEFAULT_CONCURRENCY = 2
"""Runs the local worker advances at once."""
POLL = 0.5
"""Seconds between two looks at the ledger for queued runs."""
SWEEP_EVERY = 30.0
SCHEDULE_EVERY = 1.0
"""Seconds between two looks for schedules that are due."""
PRUNE_EVERY = 3600.0


def _lock(home: Path) -> IO[str] | None:
    """The lock file, locked; None if another live process holds it."""
    home.mkdir(parents=True, exist_ok=True)
    handle = (home / LOCK_FILE).open("a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()}\n")
    handle.flush()
    return handle


def local_worker_alive(home: Path) -> bool:
    """True while a local worker holds the project's lock."""
    held = _lock(home)
    if held is None:
        return True
    held.close()
    return False


async def run_local_worker(
    *,
    settings: Settings | None = None,
    idle_exit: float | None = None,
    retention: float | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
) -> bool:
    """Advance queued runs until SIGTERM/SIGINT (drains) or ``idle_exit`` seconds without
    work; False at once if another local worker runs for this project."""
    settings = settings or load_settings()
    held = _lock(settings.home)
    if held is None:
        return False
    stopping = asyncio.Event()
    try:
        async with Runner.open(settings) as runner:
            loop = asyncio.get_running_loop()

            def stop() -> None:
                runner.drain("worker shutdown")
                stopping.set()

            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop)
            try:
                await _loop(
                    runner, settings.home, stopping, idle_exit, retention, held, max(1, concurrency)
                )
            finally:
                for sig in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(sig)
    finally:
        held.close()
    return True


async def _loop(
    runner: Runner,
    home: Path,
    stopping: asyncio.Event,
    idle_exit: float | None,
    retention: float | None,
    held: IO[str],
    concurrency: int = 1,
) -> None:
    skipped: set[str] = set()
    busy: dict[str, asyncio.Task[None]] = {}
    idle_since = time.monotonic()
    swept = pruned = scheduled = 0.0
    stopped = asyncio.ensure_future(stopping.wait())
    try:
        while not stopping.is_set():
            for run_id in [r for r, t in busy.items() if t.done()]:
                busy.pop(run_id)
            if time.monotonic() - scheduled >= SCHEDULE_EVERY:  # their runs are queued ones
                scheduled = time.monotonic()
                await _quietly(runner.schedules.fire_due())
                await _quietly(runner.forge_ci.poll_due())  # CI waits: their runs go on
            if len(busy) < concurrency:
                queued = [r for r in await _queued(runner, skipped) if r not in busy]
                if queued:  # the oldest one nobody advances yet
                    busy[queued[0]] = asyncio.create_task(_advance(runner, queued[0], skipped))
                    continue
            if runner.forge_ci.busy:  # runs going on after their CI ended, in tasks of its own
                idle_since = time.monotonic()
            if busy:
                idle_since = time.monotonic()
                await asyncio.wait(
                    [*busy.values(), stopped], timeout=POLL, return_when=asyncio.FIRST_COMPLETED
                )
                continue
            now = time.monotonic()
            if now - swept > SWEEP_EVERY:
                swept = now
                await _quietly(runner.sweep())
            if retention and now - pruned > PRUNE_EVERY:
                pruned = now
                await _quietly(runner.prune(older_than=retention))
            if idle_exit is not None and now - idle_since > idle_exit:
                if await _quietly_true(runner.forge_ci.polls()):  # CI waits: it polls them
                    idle_since = time.monotonic()
                    continue
                fcntl.flock(held, fcntl.LOCK_UN)  # first let go, then look a last time
                if not await _queued(runner, skipped):
                    return
                try:
                    fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    return  # a new worker took over, and will advance it
                idle_since = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(stopped), POLL)
    finally:
        stopped.cancel()
        if busy:  # a drain stops each after its current step
            await asyncio.gather(*busy.values(), return_exceptions=True)


async def _queued(runner: Runner, skipped: set[str]) -> list[str]:
    found = await runner.ledger.list_runs(status=str(RunStatus.QUEUED), limit=1000)
    return [r.run_id for r in reversed(found) if r.run_id not in skipped]  # oldest first


async def _advance(runner: Runner, run_id: str, skipped: set[str]) -> None:
    """Advance one queued run until it ends, waits or stops; notes go to its worker.log."""
    if not is_run_id(run_id):  # written by something other than stageline: never a path
        _log.error("refusing queued run %s: not a valid run id; it is not advanced", shown(run_id))
        skipped.add(run_id)
        return
    log = runner.settings.run_dir(run_id) / "worker.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        out.write(f"advancing run {run_id} (local worker, pid {os.getpid()})\n")
        out.flush()
        try:
            summary = await runner.resume(run_id)
        except LeaseHeld as exc:  # a process of its own advances it (`stageline resume`)
            out.write(f"skipped: {exc}\n")
            skipped.add(run_id)
        except StagelineError as exc:
            out.write(f"error: {exc}\n")
            skipped.add(run_id)
        except Exception as exc:  # one run's bug must not stop the others
            _log.exception("advancing run %s failed", run_id)
            out.write(f"error: {type(exc).__name__}: {exc}\n")
            skipped.add(run_id)
        else:
            nodes = ", ".join(f"{r.node} {r.status}" for r in summary.records)
            out.write(f"run {run_id} is {summary.status}; nodes: {nodes}\n")


async def _quietly_true(work: Awaitable[bool]) -> bool:
    try:
        return await work
    except StagelineError:
        _log.warning("periodic work failed", exc_info=True)
        return False


async def _quietly(work: Awaitable[object]) -> None:
    try:
        await work
    except StagelineError:
        _log.warning("periodic work failed", exc_info=True)
