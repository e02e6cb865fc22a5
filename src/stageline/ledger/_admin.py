"""Looking after a database: apply its migrations, copy everything to another one, or give the
space of deleted rows back (``reclaim_space``, after a prune).

``upgrade_database`` also converts a database made by the release before stageline's own
checkpoint store (see ``_legacy``). ``copy_database`` moves a ledger with its checkpoints from
one database to another (the SQLite file to Postgres, when a user outgrows one machine). Tables
are copied as ``_schema.metadata`` lists them, checkpoints included, so tables added by later
migrations come along; values are copied byte for byte. Copying again is safe: rows already in
the target are kept as they are.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Table, select

from stageline.errors import ConfigError, InputError, LeaseHeld
from stageline.ledger._backend import is_memory_url, mask_url, open_backend
from stageline.ledger._base import LedgerStore, holder_is_dead
from stageline.ledger._schema import (
    checkpoint_writes,
    checkpoints,
    metadata,
    runs,
    schema_version,
)
from stageline.ledger._sql import SqlLedger
from stageline.names import is_run_id
from stageline.plaindata import shown

__all__ = [
    "CopyReport",
    "Reclaimed",
    "UpgradeReport",
    "copy_database",
    "reclaim_space",
    "upgrade_database",
]

CHUNK = 2000
"""Ledger rows read and written per statement batch."""


@dataclass(frozen=True, kw_only=True)
class UpgradeReport:
    """Where a database's schema stands after ``upgrade_database``."""

    version: int
    applied: list[int]
    """The migrations applied just now (none if it was up to date)."""
    converted: int = 0
    """Checkpoints moved from LangGraph's tables (a database made by an older release)."""


@dataclass(frozen=True, kw_only=True)
class CopyReport:
    """What ``copy_database`` read from the source (rows the target had already are kept)."""

    tables: dict[str, int] = field(default_factory=dict)
    checkpoints: int = 0
    writes: int = 0
    """Pending writes of those checkpoints."""


@dataclass(frozen=True, kw_only=True)
class Reclaimed:
    """The database's size in bytes before and after ``reclaim_space``."""

    before: int
    after: int


async def reclaim_space(ledger: LedgerStore) -> Reclaimed | None:
    """Give the space of deleted rows back: on SQLite ``VACUUM`` (the file shrinks), on Postgres
    a plain ``VACUUM`` of the ledger's tables (new rows reuse the space at once; the files keep
    their size). None: the backend has nothing to give back."""
    sql_ledger = _sql_ledger(ledger)
    if not sql_ledger._RECLAIM:
        return None
    before = await _size(sql_ledger)
    async with sql_ledger._read() as x:
        for sql in sql_ledger._RECLAIM:
            await x.execute(sql, {})
    return Reclaimed(before=before, after=await _size(sql_ledger))


async def _size(ledger: SqlLedger) -> int:
    async with ledger._read() as x:
        rows = await x.fetch(ledger._SIZE, {})
    return int(rows[0]["size"])


def _refuse_memory(url: str, what: str) -> None:
    if is_memory_url(url):
        raise ConfigError(f"{what} needs a database; {url} keeps nothing between processes")


def _sql_ledger(ledger: LedgerStore) -> SqlLedger:
    assert isinstance(ledger, SqlLedger)  # every backend's ledger is
    return ledger


async def upgrade_database(url: str) -> UpgradeReport:
    """Apply pending migrations to the database at ``url``, and convert the checkpoints of
    an older release (LangGraph's tables) to stageline's own."""
    from stageline.ledger._legacy import convert_legacy, passthrough_serde

    _refuse_memory(url, "`stageline db upgrade`")
    began = time.time()
    backend = await open_backend(url, passthrough_serde(), legacy=True)
    try:
        ledger = _sql_ledger(backend.ledger)
        converted = await convert_legacy(url, ledger, backend.saver)
        rows = [row async for row in _rows(ledger, schema_version)]
        return UpgradeReport(
            version=await ledger.schema_version(),
            applied=sorted(r["version"] for r in rows if r["applied_at"] >= began),
            converted=converted,
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
    if source_url == target_url:
        raise ConfigError("--from and --to name the same database")
    for url in (source_url, target_url):
        _refuse_memory(mask_url(url), "`stageline db copy`")
    from stageline.ledger._legacy import passthrough_serde

    say = progress or (lambda _: None)
    serde = passthrough_serde()
    source = await open_backend(source_url, serde)
    try:
        src = _sql_ledger(source.ledger)
        target = await open_backend(target_url, serde)
        try:
            dst = _sql_ledger(target.ledger)
            await _refuse_live_runs(src)
            tables = await _copy_tables(src, dst)  # one transaction: checkpoints and runs at once
            for name, count in tables.items():
                say(f"{name}: {count} rows")
        finally:
            await target.aclose()
    finally:
        await source.aclose()
    return CopyReport(
        tables=tables,
        checkpoints=tables.get(checkpoints.name, 0),
        writes=tables.get(checkpoint_writes.name, 0),
    )


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
            keyed = (
                "run_id" if "run_id" in table.c else "thread_id" if "thread_id" in table.c else ""
            )
            async for row in _rows(source, table):
                if keyed and not (row[keyed] is None and table.c[keyed].nullable):
                    _check_copied_id(row[keyed], f"{table.name} row")
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
