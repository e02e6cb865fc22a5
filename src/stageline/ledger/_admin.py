"""Looking after a database: apply its migrations, or copy everything to another one.

``copy_database`` moves a ledger with its LangGraph checkpoints from one database to another
(the SQLite file to Postgres, when a user outgrows one machine). Ledger tables are copied as
``_schema.metadata`` lists them, so tables added by later migrations come along; checkpoints go
through the savers, so the two databases may lay them out differently. Copying again is safe:
rows already in the target are kept as they are.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import WRITES_IDX_MAP
from langgraph.checkpoint.serde.jsonplus import EXT_DELTA_SNAPSHOT, JsonPlusSerializer
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from sqlalchemy import Table, select

from stageline.checkpoints import checkpoint_serde
from stageline.errors import ConfigError, InputError, LeaseHeld
from stageline.ledger._base import holder_is_dead
from stageline.ledger._schema import metadata, runs, schema_version
from stageline.ledger._sql import SqlLedger
from stageline.names import is_run_id
from stageline.plaindata import shown

__all__ = ["CopyReport", "UpgradeReport", "copy_database", "upgrade_database"]

CHUNK = 2000
"""Ledger rows read and written per statement batch."""


@dataclass(frozen=True, kw_only=True)
class UpgradeReport:
    """Where a database's schema stands after ``upgrade_database``."""

    version: int
    applied: list[int]
    """The migrations applied just now (none if it was up to date)."""


@dataclass(frozen=True, kw_only=True)
class CopyReport:
    """What ``copy_database`` read from the source (rows the target had already are kept)."""

    tables: dict[str, int] = field(default_factory=dict)
    checkpoints: int = 0
    writes: int = 0


def passthrough_serde() -> JsonPlusSerializer:
    """A serializer that revives no type at all: each typed value is read as its raw msgpack
    extension and written back byte for byte. Copying needs no allowlist (the templates that
    registered types need not be importable) and cannot change a value on the way."""

    def hook(code: int, data: bytes) -> Any:
        if code == EXT_DELTA_SNAPSHOT:  # the savers look for these; the rest stays opaque
            return _DeltaSnapshot(
                ormsgpack.unpackb(data, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
            )
        return ormsgpack.Ext(code, data)

    return JsonPlusSerializer(allowed_msgpack_modules=None, __unpack_ext_hook__=hook)


def _sql_ledger(ledger: Any, url: str, what: str) -> SqlLedger:
    if not isinstance(ledger, SqlLedger):
        raise ConfigError(f"{what} needs a database; {url} keeps nothing between processes")
    return ledger


async def upgrade_database(url: str) -> UpgradeReport:
    """Apply pending migrations (ledger and LangGraph's) to the database at ``url``."""
    from stageline.ledger import mask_url, open_backend

    began = time.time()
    backend = await open_backend(url, checkpoint_serde())
    try:
        ledger = _sql_ledger(backend.ledger, mask_url(url), "`stageline db upgrade`")
        rows = [row async for row in _rows(ledger, schema_version)]
        return UpgradeReport(
            version=await ledger.schema_version(),
            applied=sorted(r["version"] for r in rows if r["applied_at"] >= began),
        )
    finally:
        await backend.aclose()


async def copy_database(
    source_url: str, target_url: str, *, progress: Callable[[str], None] | None = None
) -> CopyReport:
    """Copy runs, their ledger rows and their checkpoints from one database to another.

    The target is set up (migrated) first. A run that a live process is advancing in the
    source is refused (``LeaseHeld``): stop it, then copy.
    """
    from stageline.ledger import mask_url, open_backend

    if source_url == target_url:
        raise ConfigError("--from and --to name the same database")
    say = progress or (lambda _: None)
    serde = passthrough_serde()
    source = await open_backend(source_url, serde)
    try:
        src = _sql_ledger(source.ledger, mask_url(source_url), "`stageline db copy`")
        target = await open_backend(target_url, serde)
        try:
            dst = _sql_ledger(target.ledger, mask_url(target_url), "`stageline db copy`")
            await _refuse_live_runs(src)
            # Checkpoints first: a run shows up in the target only once it can be resumed there.
            checkpoints, writes = await _copy_checkpoints(source.saver, target.saver)
            say(f"checkpoints: {checkpoints} ({writes} pending writes)")
            tables = await _copy_tables(src, dst)
            for name, count in tables.items():
                say(f"{name}: {count} rows")
        finally:
            await target.aclose()
    finally:
        await source.aclose()
    return CopyReport(tables=tables, checkpoints=checkpoints, writes=writes)


async def _refuse_live_runs(ledger: SqlLedger) -> None:
    now = time.time()
    async for row in _rows(ledger, runs):
        _check_copied_id(row["run_id"], "run")
        holder = row["lease_holder"]
        if holder and (row["lease_expires_at"] or 0) > now and not holder_is_dead(holder):
            raise LeaseHeld(
                row["run_id"],
                holder,
                time.strftime("%H:%M:%S", time.localtime(row["lease_expires_at"])),
            )


def _check_copied_id(run_id: Any, what: str) -> None:
    """Refuse to copy a row whose run id is not a name (one that could be used as a path)."""
    if not is_run_id(run_id):
        raise InputError(
            f"the source holds a {what} with the malformed run id {shown(run_id)}; "
            "nothing more was copied (run ids are 1-64 letters, digits, '.', '_' or '-')"
        )


async def _copy_checkpoints(source: Any, target: Any) -> tuple[int, int]:
    checkpoints = writes = 0
    async for saved in source.alist(None):
        conf = saved.config["configurable"]
        _check_copied_id(conf["thread_id"], "checkpoint")
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
            writes += len(items)
        checkpoints += 1
    return checkpoints, writes


async def _copy_tables(source: SqlLedger, target: SqlLedger) -> dict[str, int]:
    """Every ledger table but the schema version, in one target transaction."""
    counts: dict[str, int] = {}
    src_dialect, dst_dialect = source._x.dialect, target._x.dialect
    async with target._tx() as x:
        for table in metadata.sorted_tables:
            if table is schema_version:
                continue
            stmt = target._upsert(table).on_conflict_do_nothing()
            sql = str(stmt.compile(dialect=dst_dialect))
            convert = _converter(table, src_dialect, dst_dialect)
            batch: list[dict[str, Any]] = []
            counts[table.name] = 0
            keyed = "run_id" in table.c
            async for row in _rows(source, table):
                if keyed:
                    _check_copied_id(row["run_id"], f"{table.name} row")
                batch.append(convert(row))
                if len(batch) >= CHUNK:
                    await x.execute_many(sql, batch)
                    counts[table.name] += len(batch)
                    batch = []
            if batch:
                await x.execute_many(sql, batch)
                counts[table.name] += len(batch)
    return counts


async def _rows(ledger: SqlLedger, table: Table) -> AsyncIterator[dict[str, Any]]:
    """All rows of ``table``, a chunk per read, in primary-key order."""
    offset = 0
    while True:
        stmt = select(table).order_by(*table.primary_key.columns).limit(CHUNK).offset(offset)
        compiled = stmt.compile(dialect=ledger._x.dialect)
        async with ledger._read() as x:
            chunk = await x.fetch(str(compiled), compiled.params)
        for row in chunk:
            yield row
        if len(chunk) < CHUNK:
            return
        offset += CHUNK


def _converter(table: Table, src: Any, dst: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """Values as the source driver returns them, turned into what the target driver takes
    (SQLite's 0/1 into booleans for Postgres, say), by the schema's own column types."""
    steps: list[tuple[str, Callable[[Any], Any]]] = []
    for column in table.columns:
        for proc in (column.type.result_processor(src, None), column.type.bind_processor(dst)):
            if proc is not None:
                steps.append((column.name, proc))

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        out = dict(row)
        for name, proc in steps:
            out[name] = proc(out[name])
        return out

    return convert
