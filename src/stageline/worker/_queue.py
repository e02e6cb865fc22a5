"""The job queue: a procrastinate app over the Postgres database, and its tasks.

One task advances a run (``stageline.advance_run``); it is deferred with ``lock=run_id`` (one
worker advances a run at a time) and ``queueing_lock=run_id`` (one waiting job per run). The
run's own lease in the ledger still guards it against anything outside the queue. Periodic
tasks sweep deadlines and prune old runs. Every task calls the runner: no lifecycle here.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from procrastinate import App, JobContext, PsycopgConnector, RetryStrategy
from procrastinate.exceptions import AlreadyEnqueued
from procrastinate.schema import SchemaManager

from stageline.errors import InvalidTransition, LeaseHeld, StorageError
from stageline.ledger import RunStatus
from stageline.names import is_run_id
from stageline.plaindata import shown
from stageline.runner import Runner

__all__ = [
    "ADVANCE_TASK",
    "defer_run",
    "ensure_queue_schema",
    "queue_app",
    "queue_conninfo",
]

_log = logging.getLogger("stageline.worker")

ADVANCE_TASK = "stageline.advance_run"
SWEEP_CRON = "* * * * *"
"""Deadline sweeps: every minute (one job per tick across all workers)."""
PRUNE_CRON = "17 * * * *"
"""Retention: once an hour."""
RETRY_WAIT = 2
"""Seconds before an advance that found the run's lease held (or the database gone) retries."""

_STAGELINE_OPTIONS = ("pool_min_size", "pool_max_size", "pool_timeout", "prepare")
_SCHEMA_LOCK = 0x5374_6167  # "Stag": serialises schema set-up between starting workers


def queue_conninfo(url: str) -> str:
    """The database URL as libpq takes it: stageline's own pool options removed."""
    parts = urlsplit(url)
    query = [
        (k, v)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if k not in _STAGELINE_OPTIONS
    ]
    scheme = parts.scheme.split("+", 1)[0]
    return parts._replace(scheme=scheme, query=urlencode(query)).geturl()


async def ensure_queue_schema(url: str) -> bool:
    """Apply procrastinate's schema unless it is there; True if it was applied now."""
    try:
        conn = await psycopg.AsyncConnection.connect(queue_conninfo(url), autocommit=True)
    except psycopg.Error as exc:
        raise StorageError(f"cannot connect to the job queue's database: {exc}") from exc
    async with conn, conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        cur = await conn.execute("SELECT to_regclass('procrastinate_jobs')")
        row = await cur.fetchone()
        if row and row[0] is not None:
            return False
        await conn.execute(SchemaManager.get_schema())
    return True


def queue_app(url: str) -> App:
    """The procrastinate app over the database at ``url``, with stageline's tasks."""
    app = App(connector=PsycopgConnector(conninfo=queue_conninfo(url), min_size=1, max_size=4))
    app.task(
        name=ADVANCE_TASK,
        pass_context=True,
        retry=RetryStrategy(wait=RETRY_WAIT, retry_exceptions={LeaseHeld, StorageError}),
    )(advance_run)
    app.periodic(cron=SWEEP_CRON)(app.task(name="stageline.sweep", pass_context=True)(sweep))
    app.periodic(cron=PRUNE_CRON)(app.task(name="stageline.prune", pass_context=True)(prune))
    return app


async def defer_run(app: App, run_id: str) -> int | None:
    """Queue an advance of ``run_id``; None when one is queued already."""
    try:
        return await app.configure_task(
            ADVANCE_TASK, lock=run_id, queueing_lock=run_id
        ).defer_async(run_id=run_id)
    except AlreadyEnqueued:
        return None


def _runner(context: JobContext) -> Runner:
    runner = context.additional_context.get("runner")
    if not isinstance(runner, Runner):
        raise RuntimeError("stageline tasks run in `stageline worker`, which opens the runner")
    return runner


async def advance_run(context: JobContext, run_id: str) -> str:
    """Advance ``run_id`` until it ends, waits or is drained; a drained run is queued again."""
    if not is_run_id(run_id):  # a job not deferred by stageline: refused, never retried
        _log.error("refusing job for run %s: not a valid run id", shown(run_id))
        return "refused: not a valid run id"
    runner = _runner(context)
    try:  # a run decided, cancelled or done meanwhile is left as it is
        summary = await runner.resume(run_id, expect=(RunStatus.QUEUED, RunStatus.RUNNING))
    except InvalidTransition as exc:
        return f"nothing to do: {exc}"
    if summary.status is RunStatus.QUEUED:  # drained (this worker stops): another continues it
        await defer_run(context.app, run_id)
    return str(summary.status)


async def sweep(context: JobContext, timestamp: int) -> int:
    """Apply the deadline steps that are due (remind, escalate, the safe default)."""
    return len(await _runner(context).sweep())


async def prune(context: JobContext, timestamp: int) -> int:
    """Delete runs older than the worker's retention (``--retention``; off: nothing)."""
    older_than: Any = context.additional_context.get("retention")
    if not older_than:
        return 0
    report = await _runner(context).prune(older_than=float(older_than))
    if report.run_ids:
        _log.info("pruned %d run(s) idle since before %s", len(report.run_ids), report.cutoff)
    return len(report.run_ids)
