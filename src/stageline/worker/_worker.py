"""``stageline worker``: advance queued runs from the Postgres job queue until told to stop.

One runner per worker process, opened at start and closed at exit. SIGTERM (or Ctrl-C) drains:
every run in flight stops after its current step, checkpoints, goes back to ``queued`` and is
queued again for another worker; then the worker exits. A worker that dies without draining
(SIGKILL, a lost machine) leaves its job ``doing`` with a heartbeat that stops: every worker
looks for such stalled jobs every few seconds and puts them back in the queue, and the worker
that takes one resumes the run from its checkpoint (taking over the dead holder's lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable
from typing import Any

import psycopg
from procrastinate import App
from procrastinate.exceptions import ConnectorException, ProcrastinateException, UniqueViolation
from procrastinate.jobs import Status

from stageline.config import Settings, load_settings
from stageline.errors import StorageError, UsageError
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.worker._queue import ADVANCE_TASK, defer_run, ensure_queue_schema, queue_app

__all__ = ["HEARTBEAT", "SCHEDULE_EVERY", "STALLED_AFTER", "run_worker", "work_queue"]

_log = logging.getLogger("stageline.worker")

HEARTBEAT = 2.0
"""Seconds between two heartbeats of a worker (procrastinate ``update_heartbeat_interval``)."""
STALLED_AFTER = 6.0
"""Seconds without a heartbeat after which a worker is taken for dead and its jobs requeued."""
RESTART_WAIT = 1.0
"""Seconds before a worker whose database went away starts taking jobs again."""
SCHEDULE_EVERY = 1.0
"""Seconds between two looks for schedules that are due."""
ADOPT_LIMIT = 1000
"""Queued runs without a job (made by ``Runner.create``, a copy, a drained foreground run)
queued at worker start."""


def is_postgres(url: str) -> bool:
    return url.startswith("postgres")


async def run_worker(
    *,
    concurrency: int = 1,
    retention: float | None = None,
    settings: Settings | None = None,
    heartbeat: float = HEARTBEAT,
    stalled_after: float = STALLED_AFTER,
    name: str = "stageline",
    stopped_early: Callable[[], bool] | None = None,
) -> None:
    """Run a worker until SIGTERM or SIGINT, then drain and return.

    A signal during start-up (``stopped_early()`` says whether one came before this was
    called) stops it before it takes a job: it returns as cleanly as after a drain.
    """
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    runners: list[Runner] = []

    def stop() -> None:
        if runners:
            in_flight = runners[0].drain("worker shutdown")
            _log.warning("stopping: draining %d run(s) after their current step", in_flight)
        stopping.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
    try:
        if stopped_early is not None and stopped_early():
            return
        settings = settings or load_settings()
        if not is_postgres(settings.database_url):
            raise UsageError(
                "`stageline worker` takes its jobs from Postgres; on SQLite, background runs go "
                "to one local worker (`stageline worker --local`, started by `run --detach`)"
            )
        await ensure_queue_schema(settings.database_url)
        app = queue_app(settings.database_url)
        async with Runner.open(settings) as runner, app.open_async():
            runners.append(runner)
            if stopping.is_set():
                return
            await _adopt_queued(app, runner)
            await work_queue(
                app,
                runner,
                stopping,
                concurrency=concurrency,
                retention=retention,
                heartbeat=heartbeat,
                stalled_after=stalled_after,
                name=name,
            )
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


async def work_queue(
    app: App,
    runner: Runner,
    stopping: asyncio.Event,
    *,
    concurrency: int = 1,
    retention: float | None = None,
    heartbeat: float = HEARTBEAT,
    stalled_after: float = STALLED_AFTER,
    name: str = "stageline",
) -> None:
    """Take jobs from the open queue ``app`` until ``stopping`` is set (drain the runner first:
    procrastinate then waits for the jobs in flight). ``stageline worker`` and ``stageline
    serve`` on Postgres both work this way."""
    options: dict[str, Any] = dict(
        concurrency=concurrency,
        name=name,
        install_signal_handlers=False,
        update_heartbeat_interval=heartbeat,
        stalled_worker_timeout=stalled_after,
        additional_context={"runner": runner, "retention": retention},
    )
    rescuer = asyncio.create_task(_requeue_stalled(app, stalled_after, heartbeat))
    scheduler = asyncio.create_task(_fire_schedules(app, runner, stopping), name=f"{name} cron")
    try:
        while not stopping.is_set():
            # procrastinate's worker stops when the database goes away (its listener or
            # heartbeat fails): start a new one, until the database is back.
            work = asyncio.create_task(app.run_worker_async(**options), name=f"{name} worker")
            watch = asyncio.create_task(stopping.wait())
            try:
                await asyncio.wait({work, watch}, return_when=asyncio.FIRST_COMPLETED)
                if stopping.is_set():
                    work.cancel()  # procrastinate stops fetching and waits for the jobs in flight
                await work
            except asyncio.CancelledError:
                if not stopping.is_set():
                    raise
            except (ConnectorException, psycopg.Error, StorageError) as exc:
                if stopping.is_set():
                    raise
                _log.warning(
                    "the job queue is unreachable (%s); retrying in %ss",
                    type(exc).__name__,
                    RESTART_WAIT,
                )
            finally:
                watch.cancel()
                if not work.done():
                    work.cancel()
            if not stopping.is_set():
                _log.warning("the job queue's worker stopped; starting it again")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), RESTART_WAIT)
    finally:
        if not stopping.is_set():
            scheduler.cancel()
        for task in (rescuer, scheduler):
            if task is rescuer:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task  # the scheduler ends by itself: a firing is never cut in two


async def _adopt_queued(app: App, runner: Runner) -> None:
    for run in await runner.ledger.list_runs(status=str(RunStatus.QUEUED), limit=ADOPT_LIMIT):
        await defer_run(app, run.run_id)


async def _fire_schedules(
    app: App, runner: Runner, stopping: asyncio.Event, every: float = SCHEDULE_EVERY
) -> None:
    """Fire the schedules that are due, every ``every`` seconds, and queue their runs; poll the
    CI waits that are due: every worker looks, and the ledger lets one fire each due time and
    make each poll."""
    while not stopping.is_set():
        try:
            for run_id in await runner.schedules.fire_due():
                await defer_run(app, run_id)
            await runner.forge_ci.poll_due()  # CI waits that ended: their runs go on here
        except Exception:  # the database went away for a moment: look again next time
            _log.warning("could not fire the schedules that are due", exc_info=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), every)


async def _requeue_stalled(app: App, stalled_after: float, every: float) -> None:
    """Put the advance jobs of dead workers back in the queue, every ``every`` seconds."""
    while True:
        try:
            stalled: Any = await app.job_manager.get_stalled_jobs(
                task_name=ADVANCE_TASK, seconds_since_heartbeat=stalled_after
            )
            for job in stalled:
                await _requeue(app, job)
        except Exception:  # the database went away for a moment: look again next time
            _log.warning("could not look for stalled jobs", exc_info=True)
        await asyncio.sleep(every)


async def _requeue(app: App, job: Any) -> None:
    try:
        await app.job_manager.retry_job(job)
    except UniqueViolation:
        # The run has a queued job already (queueing_lock): end this one, which frees the
        # run's lock for that one.
        await app.job_manager.finish_job(job=job, status=Status.FAILED, delete_job=False)
        _log.warning(
            "ended stalled job %s: run %s is queued again already",
            job.id,
            job.task_kwargs.get("run_id"),
        )
    except ProcrastinateException:  # another worker requeued it first
        return
    else:
        _log.warning("requeued stalled job %s (%s)", job.id, job.call_string)
