"""Workers: advance queued runs in the background, through the runner.

On Postgres, any number of ``stageline worker`` processes take "advance run X" jobs from a
procrastinate queue in the same database; on SQLite, one local worker per project.
"""

from stageline.worker._local import local_worker_alive, run_local_worker
from stageline.worker._queue import (
    ADVANCE_TASK,
    defer_run,
    ensure_queue_schema,
    queue_app,
)
from stageline.worker._worker import is_postgres, run_worker, work_queue

__all__ = [
    "ADVANCE_TASK",
    "defer_run",
    "ensure_queue_schema",
    "is_postgres",
    "local_worker_alive",
    "queue_app",
    "run_local_worker",
    "run_worker",
    "work_queue",
]
