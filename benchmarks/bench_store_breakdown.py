"""What each Postgres transaction of bench_store's runs is: a foreground 10-node run, a gate
round trip (to the wait; decide and finish) and a worker's run, statement by statement.

Run: ``python benchmarks/bench_store_breakdown.py URL`` (an empty database).

Seen from the client: every statement psycopg's async cursors send (stageline's pool and
procrastinate's) is logged with its connection; a transaction is BEGIN .. COMMIT/ROLLBACK on one
connection, or one statement on its own (autocommit: each is a transaction, and so is the empty
query of procrastinate's pool check). Counts match bench_store's ``xact_commit`` figures up to
what runs on a timer (lease renewals, heartbeats, the stalled-job look), which lands where it
falls. Nothing is timed here: the wrapping costs time.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from bench_runner import stageline_template
from bench_store import _settings, opened_runner, stageline_gated

from stageline.ledger import RunStatus
from stageline.worker import defer_run, ensure_queue_schema, queue_app, work_queue

_LOG: list[tuple[int, str]] = []
_SKIP: list[asyncio.Task[Any] | None] = [None]
_ON = [False]
_execute = psycopg.AsyncCursor.execute
_executemany = psycopg.AsyncCursor.executemany


def _text(cursor: Any, query: Any) -> str:
    if isinstance(query, bytes):
        return query.decode()
    return query if isinstance(query, str) else str(query.as_string(cursor.connection))


def _short(sql: str) -> str:
    """The statement's verb and table, and what it selects on."""
    flat = " ".join(sql.split())
    if not flat:
        return "(empty query: a pool's connection check)"
    verb = re.match(r"(WITH RECURSIVE|SELECT|INSERT INTO|UPDATE|DELETE FROM|\w+)", flat, re.I)
    tables = sorted(set(re.findall(r"\b(?:stageline|procrastinate)_\w+", flat)))
    head = verb.group(1).upper() if verb else flat[:20]
    return f"{head} {', '.join(tables)}".strip()


def _logging() -> bool:
    if not _ON[0]:
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:
        return True
    return task is None or task is not _SKIP[0]


async def _traced_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
    if _logging():
        _LOG.append((id(self.connection), _short(_text(self, query))))
    return await _execute(self, query, params, **kw)


async def _traced_executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
    rows = list(params_seq)
    if _logging():
        _LOG.append((id(self.connection), f"{_short(_text(self, query))} x{len(rows)}"))
    return await _executemany(self, query, rows, **kw)


psycopg.AsyncCursor.execute = _traced_execute  # type: ignore[method-assign]
psycopg.AsyncCursor.executemany = _traced_executemany  # type: ignore[method-assign]


def _transactions() -> list[list[str]]:
    open_: dict[int, list[str]] = {}
    found: list[list[str]] = []
    for conn, sql in _LOG:
        if sql == "BEGIN":
            open_[conn] = []
            found.append(open_[conn])
        elif sql in ("COMMIT", "ROLLBACK"):
            open_.pop(conn, None)
        elif conn in open_:
            open_[conn].append(sql)
        else:
            found.append([sql])
    return found


@contextmanager
def shown(title: str) -> Iterator[None]:
    _LOG.clear()
    _ON[0] = True
    try:
        yield
    finally:
        _ON[0] = False
        found = _transactions()
        print(f"{title}: {len(found)} transactions")
        for i, statements in enumerate(found, 1):
            print(f"  {i:2d}. {' | '.join(statements)}")


async def main(url: str) -> None:
    folder = Path(tempfile.mkdtemp(prefix="stageline-breakdown-"))
    settings = _settings(folder, url, "h")
    await ensure_queue_schema(url)
    template, gated = stageline_template(), stageline_gated()
    async with opened_runner(settings) as runner:
        await runner.start(template, {"n": 0})  # warm: schema, statements, imports
        await runner.approve((await runner.start(gated, {"n": 0})).run.run_id)
        with shown("foreground 10-node run (Runner.start)"):
            await runner.start(template, {"n": 0})
        with shown("gate round trip, to the wait (Runner.start)"):
            waiting = await runner.start(gated, {"n": 0})
        with shown("gate round trip, decide and finish (Runner.approve)"):
            await runner.approve(waiting.run.run_id)
    app = queue_app(url)
    async with opened_runner(settings) as runner, app.open_async():
        runner.load(template)
        stopping = asyncio.Event()
        worker = asyncio.create_task(work_queue(app, runner, stopping))

        async def through_the_queue() -> None:
            _SKIP[0] = None
            run = await runner.create(template, {"n": 0})
            await defer_run(app, run.run_id)
            _SKIP[0] = asyncio.current_task()  # the looks for its end are not the run's
            while (await runner.ledger.get_run(run.run_id)).status is not RunStatus.SUCCEEDED:
                await asyncio.sleep(0.02)
            await asyncio.sleep(0.3)  # the job's end, and the worker's next look for one

        await through_the_queue()  # warm
        with shown("worker's run (Runner.create, defer_run, the worker's job)"):
            await through_the_queue()
        runner.drain("breakdown done")
        stopping.set()
        await worker


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("url", help="an empty Postgres database")
    asyncio.run(main(parser.parse_args().url))
