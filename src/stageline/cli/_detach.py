"""``run --detach``, ``fork --detach``: queue the new run for a worker.

On Postgres the run goes to the job queue, for any ``stageline worker``. On SQLite it goes to
the project's one local worker (``stageline worker --local``), started here unless it runs.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stageline.cli._render import console

if TYPE_CHECKING:
    from stageline.config import Settings
    from stageline.runner import Runner

__all__ = ["LOCAL_IDLE_EXIT", "hand_off", "queue_for_worker", "spawn_local_worker"]

LOCAL_IDLE_EXIT = 60.0
"""Seconds a local worker started by ``run --detach`` waits for more work before it exits."""


async def queue_for_worker(
    run_id: str,
    make: Callable[[Runner], Awaitable[Any]],
    said: Callable[[Any], str | None] = lambda made: None,
) -> None:
    """Make queued run ``run_id`` with ``make`` and hand it to a worker; print ``said(made)``
    (when it says something), then how to follow it."""
    from stageline.runner import Runner

    async with Runner.open() as runner:  # delivers run.queued (and registers new sinks)
        made = await make(runner)
        settings = runner.settings
    if (line := said(made)) is not None:
        console().print(line)
    await hand_off(settings, run_id)


async def hand_off(settings: Settings, run_id: str) -> None:
    """Give a queued run to a worker (the job queue, or the local worker); say how to follow."""
    from stageline.worker import defer_run, ensure_queue_schema, is_postgres
    from stageline.worker import queue_app as _queue_app

    out = console()
    if is_postgres(settings.database_url):
        await ensure_queue_schema(settings.database_url)
        app = _queue_app(settings.database_url)
        async with app.open_async():
            await defer_run(app, run_id)
        out.print(f"queued run {run_id}; a `stageline worker` advances it")
    else:
        # After the run is committed: a worker letting go of its lock looks once more.
        log = settings.home / "worker.log"
        pid = spawn_local_worker(settings.home, log)
        how = f"started the local worker (pid {pid})" if pid else "the local worker advances it"
        out.print(f"queued run {run_id}; {how}")
        out.print(f"  worker output: {log}")
    out.print(f"  follow:  stageline logs {run_id} --follow")
    out.print(f"  details: stageline show {run_id}")


def spawn_local_worker(home: Path, log: Path) -> int | None:
    """Start ``stageline worker --local`` in its own session unless one runs; its pid."""
    from stageline.worker import local_worker_alive

    if local_worker_alive(home):
        return None
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        child = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "stageline.cli",
                "worker",
                "--local",
                "--idle-exit",
                str(LOCAL_IDLE_EXIT),
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    # It outlives us on purpose; mark it reaped so Popen does not warn about it at exit.
    child.returncode = 0
    return child.pid
