"""Converting a database made by the release before stageline's own checkpoint store.

Those releases kept checkpoints in LangGraph's own tables, written by its ``SqliteSaver`` /
``AsyncPostgresSaver`` layouts. ``stageline db upgrade`` reads them back through LangGraph's
public saver API (``list``/``alist`` give each checkpoint with its pending writes), writes them
with stageline's saver, and then drops LangGraph's tables. Values travel byte for byte: the
serializer used revives no type at all (each typed value stays its raw msgpack extension), so
no allowlist is needed and nothing can change on the way. A conversion cut short is finished by
the next upgrade: every write is an upsert, and the old tables go only at the end.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver, CheckpointTuple
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from stageline.errors import InputError
from stageline.ledger._sql import SqlLedger
from stageline.names import is_run_id
from stageline.plaindata import shown

__all__ = ["convert_legacy", "passthrough_serde"]

_SQLITE_TABLES = ("writes", "checkpoints")
_POSTGRES_TABLES = ("checkpoint_writes", "checkpoint_blobs", "checkpoints", "checkpoint_migrations")


def passthrough_serde() -> JsonPlusSerializer:
    """A serializer that revives no type at all: each typed value is read as its raw msgpack
    extension and written back byte for byte."""

    def hook(code: int, data: bytes) -> Any:
        return ormsgpack.Ext(code, data)

    return JsonPlusSerializer(allowed_msgpack_modules=None, __unpack_ext_hook__=hook)


async def convert_legacy(url: str, ledger: SqlLedger, target: BaseCheckpointSaver[Any]) -> int:
    """Move LangGraph's checkpoints into stageline's tables; the number of checkpoints moved
    (0 if the database had none of LangGraph's tables)."""
    if not await ledger.legacy_checkpoints():
        return 0
    tables: tuple[str, ...]
    if url.startswith("postgres"):
        moved = await _from_postgres(url, target)
        tables = _POSTGRES_TABLES
    else:
        from stageline.ledger._sqlite import sqlite_path

        moved = await _from_sqlite(str(sqlite_path(url)), target)
        tables = _SQLITE_TABLES
    async with ledger._tx() as x:
        for table in tables:
            await x.execute(f"DROP TABLE IF EXISTS {table}", {})
    return moved


async def _from_sqlite(path: str, target: BaseCheckpointSaver[Any]) -> int:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(path, check_same_thread=False)
    try:
        source = SqliteSaver(conn, serde=passthrough_serde())
        found = await asyncio.to_thread(lambda: iter(source.list(None)))
        moved = 0
        while (saved := await asyncio.to_thread(next, found, None)) is not None:
            await _put(target, saved)
            moved += 1
        return moved
    finally:
        conn.close()


async def _from_postgres(url: str, target: BaseCheckpointSaver[Any]) -> int:
    import psycopg
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row

    from stageline.ledger._postgres import PostgresOptions

    opts = PostgresOptions.from_url(url)
    async with await psycopg.AsyncConnection.connect(
        opts.conninfo, autocommit=True, row_factory=dict_row, prepare_threshold=None
    ) as conn:
        source = AsyncPostgresSaver(conn, serde=passthrough_serde())
        return await _put_all(source.alist(None), target)


async def _put_all(found: AsyncIterator[CheckpointTuple], target: BaseCheckpointSaver[Any]) -> int:
    moved = 0
    async for saved in found:
        await _put(target, saved)
        moved += 1
    return moved


async def _put(target: BaseCheckpointSaver[Any], saved: CheckpointTuple) -> None:
    conf = saved.config["configurable"]
    if not is_run_id(conf["thread_id"]):
        raise InputError(
            f"a checkpoint has the malformed run id {shown(conf['thread_id'])}; nothing more "
            "was converted (run ids are 1-64 letters, digits, '.', '_' or '-')"
        )
    put: dict[str, Any] = {
        "thread_id": conf["thread_id"],
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
    }
    if saved.parent_config:
        put["checkpoint_id"] = saved.parent_config["configurable"]["checkpoint_id"]
    stored = await target.aput(
        {"configurable": put},
        saved.checkpoint,
        saved.metadata,
        saved.checkpoint["channel_versions"],
    )
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in saved.pending_writes or ():
        by_task.setdefault(task_id, []).append((channel, value))
    for task_id, items in by_task.items():
        # Ordinary writes keep their positions (0, 1, ...); special ones have fixed indexes.
        regular = [w for w in items if w[0] not in WRITES_IDX_MAP]
        special = [w for w in items if w[0] in WRITES_IDX_MAP]
        for part in (regular, special):
            if part:
                await target.aput_writes(stored, part, task_id)
