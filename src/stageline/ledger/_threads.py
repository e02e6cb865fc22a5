"""What the LangGraph-compatible API keeps beside a run: thread metadata and its API runs.

A LangGraph *thread* is a stageline run (the thread id is the run id); one made empty by
``threads.create`` has a metadata row and no run until its first API run names a template. A
LangGraph *run* is one advance of the thread (its start, each resume): an ``ApiRun`` row with
its own id and status, so that ``runs.list/get/join`` can find it again. Both go with the run
when it is deleted (``delete_run``, retention).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from sqlalchemy import Table, Text, bindparam, cast, delete, insert, select, update

from stageline.errors import InvalidTransition
from stageline.ledger._schema import (
    api_runs,
    checkpoint_blobs,
    checkpoint_writes,
    checkpoints,
    thread_meta,
)
from stageline.ledger._sql_statements import latest_checkpoint_id

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["ApiRun", "ApiRunStatus", "ThreadMeta", "ThreadsSql"]


class ApiRunStatus(StrEnum):
    PENDING = "pending"  # accepted; its advance has not begun
    RUNNING = "running"  # the run is being advanced for it
    SUCCESS = "success"  # the run reached its end, a gate or question (or a gate rejected it)
    ERROR = "error"  # the advance failed, or a node did
    INTERRUPTED = "interrupted"  # the run was cut short (cancelled, or its process stopped)

    @property
    def done(self) -> bool:
        return self not in (ApiRunStatus.PENDING, ApiRunStatus.RUNNING)


@dataclass(frozen=True, kw_only=True)
class ThreadMeta:
    """A thread's metadata; ``run_id`` is the thread id (the run may not exist yet)."""

    run_id: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["metadata"] = json.dumps(self.metadata, default=str)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ThreadMeta:
        data = {k: row[k] for k in cls.__dataclass_fields__}
        data["metadata"] = json.loads(data["metadata"] or "{}")
        return cls(**data)


@dataclass(frozen=True, kw_only=True)
class ApiRun:
    """One LangGraph API run: an advance of thread (run) ``run_id``."""

    api_run_id: str
    run_id: str
    assistant_id: str
    status: ApiRunStatus = ApiRunStatus.PENDING
    metadata: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["metadata"] = json.dumps(self.metadata, default=str)
        row["status"] = str(self.status)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ApiRun:
        data = {k: row[k] for k in cls.__dataclass_fields__}
        data["metadata"] = json.loads(data["metadata"] or "{}")
        data["status"] = ApiRunStatus(data["status"])
        return cls(**data)


def _exists(run_id: str) -> InvalidTransition:
    return InvalidTransition(f"thread {run_id} already exists")


class ThreadsSql:
    """Thread metadata and API runs of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _autocommit(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...
        def _insert_ignoring(self, table: Any, keys: list[str]) -> Any: ...

    async def put_thread(self, meta: ThreadMeta) -> ThreadMeta:
        """Record an empty thread; a thread id taken already is refused. One statement (insert
        unless there), so of two processes creating one id at once, one is refused: a check
        first and an insert after could both pass the check."""
        async with self._autocommit() as x:
            if not await x.execute(self._sql(self._insert_thread()), meta.to_row()):
                raise _exists(meta.run_id)
        return meta

    def _insert_thread(self) -> Any:
        """Insert a thread's row unless its id is there (0 rows then)."""
        return self._insert_ignoring(_m, ["run_id"])

    async def thread_meta(self, run_id: str) -> ThreadMeta | None:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_THREAD), {"run_id": run_id})
        return ThreadMeta.from_row(rows[0]) if rows else None

    async def thread_metas(self) -> list[ThreadMeta]:
        """Every thread with a metadata row, oldest first."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_THREADS), {})
        return [ThreadMeta.from_row(r) for r in rows]

    async def set_thread_metadata(self, run_id: str, metadata: Mapping[str, Any]) -> ThreadMeta:
        """Set a thread's metadata (making its row if it has none)."""
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT_THREAD), {"run_id": run_id})
            found = ThreadMeta.from_row(rows[0]) if rows else ThreadMeta(run_id=run_id)
            meta = replace(found, metadata=dict(metadata), updated_at=time.time())
            if not rows and await x.execute(self._sql(self._insert_thread()), meta.to_row()):
                return meta  # (another process's row made meanwhile is updated instead)
            await x.execute(
                self._sql(_UPDATE_THREAD),
                {"run_id": run_id, "meta": meta.to_row()["metadata"], "now": meta.updated_at},
            )
        return meta

    async def add_api_run(self, run: ApiRun) -> ApiRun:
        async with self._autocommit() as x:
            await x.execute(self._sql(_INSERT_API_RUN), run.to_row())
        return run

    async def api_run(self, api_run_id: str) -> ApiRun | None:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_API_RUN), {"api_run_id": api_run_id})
        return ApiRun.from_row(rows[0]) if rows else None

    async def api_runs(self, run_id: str) -> list[ApiRun]:
        """The API runs of thread ``run_id``, newest first."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_API_RUNS), {"run_id": run_id})
        return [ApiRun.from_row(r) for r in rows]

    async def latest_checkpoint_id(self, run_id: str) -> str | None:
        """The id of the run's latest checkpoint (None: it has none yet): one indexed read,
        nothing decoded, for a run about to go on from it (where its stream starts)."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_LATEST_CHECKPOINT_ID), {"run_id": run_id, "ns": ""})
        return rows[0]["checkpoint_id"] if rows else None

    async def copy_checkpoints(self, from_run_id: str, to_run_id: str) -> None:
        """Copy every checkpoint of a run (with its pending writes and channel values) to
        another run id, in one transaction: ``threads.copy`` keeps the whole history."""
        params = {"src": from_run_id, "dst": to_run_id}
        async with self._tx() as x:
            for stmt in _COPY_CHECKPOINTS:
                await x.execute(self._sql(stmt), params)

    async def delete_api_run(self, api_run_id: str) -> bool:
        """Forget an API run (its thread's run and checkpoints stay); False if there was none."""
        async with self._tx() as x:
            found = await x.fetch(self._sql(_SELECT_API_RUN), {"api_run_id": api_run_id})
            if found:
                await x.execute(self._sql(_DELETE_API_RUN), {"api_run_id": api_run_id})
        return bool(found)

    async def set_api_run_status(
        self, api_run_id: str, status: ApiRunStatus | str, error: str | None = None
    ) -> None:
        async with self._autocommit() as x:
            await x.execute(
                self._sql(_SET_API_RUN),
                {
                    "api_run_id": api_run_id,
                    "status": str(ApiRunStatus(status)),
                    "error": error,
                    "now": time.time(),
                },
            )


_m, _a = thread_meta, api_runs
_SELECT_THREAD = select(_m).where(_m.c.run_id == bindparam("run_id"))
_SELECT_THREADS = select(_m).order_by(_m.c.created_at, _m.c.run_id)
_UPDATE_THREAD = (
    update(_m)
    .where(_m.c.run_id == bindparam("run_id"))
    .values(metadata=bindparam("meta"), updated_at=bindparam("now"))
)
_INSERT_API_RUN = insert(_a)
_SELECT_API_RUN = select(_a).where(_a.c.api_run_id == bindparam("api_run_id"))
_LATEST_CHECKPOINT_ID = latest_checkpoint_id(bindparam("run_id"), bindparam("ns"))
_DELETE_API_RUN = delete(_a).where(_a.c.api_run_id == bindparam("api_run_id"))
_SELECT_API_RUNS = (
    select(_a)
    .where(_a.c.run_id == bindparam("run_id"))
    .order_by(_a.c.created_at.desc(), _a.c.api_run_id.desc())
)
_SET_API_RUN = (
    update(_a)
    .where(_a.c.api_run_id == bindparam("api_run_id"))
    .values(status=bindparam("status"), error=bindparam("error"), updated_at=bindparam("now"))
)


def _copy_rows(table: Table) -> Any:
    """INSERT the rows of thread ``:src`` of ``table`` again as thread ``:dst``."""
    columns = [
        cast(bindparam("dst"), Text).label("thread_id") if c.name == "thread_id" else c
        for c in table.c
    ]
    chosen = select(*columns).where(table.c.thread_id == bindparam("src"))
    return insert(table).from_select([c.name for c in table.c], chosen)


_COPY_CHECKPOINTS = [_copy_rows(t) for t in (checkpoint_blobs, checkpoints, checkpoint_writes)]
