"""The runs list read from a SQLite ledger with the standard library alone.

``stageline runs`` only reads one table, yet the ledger's store imports SQLAlchemy (half the
instructions of the whole process) and runs on asyncio. Here the same query runs on a
read-only ``sqlite3`` connection and builds the same ``Run`` records. It answers only when it
can answer exactly as the store would: a ``sqlite:///PATH`` URL without options, a file that
exists, is not LangGraph's legacy layout, and holds the current schema. Otherwise (or on any
error) it answers ``None`` and the caller opens the store, which creates, migrates, refuses or
fails with its own messages.

The table and column names are copies of ``_schema``'s (which imports SQLAlchemy); a unit test
holds them equal.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from stageline.ledger.records import Run

__all__ = [
    "RUNS_TABLE",
    "RUN_COLUMNS",
    "SCHEMA_VERSION",
    "VERSION_TABLE",
    "read_runs",
    "sqlite_path",
]

SCHEMA_VERSION = 14
"""``len(_migrations.MIGRATIONS)``: the version of a database every migration was applied to."""
VERSION_TABLE = "stageline_schema_version"
RUNS_TABLE = "stageline_runs"
RUN_COLUMNS = (
    "run_id",
    "template",
    "template_version",
    "status",
    "attempt",
    "inputs",
    "created_at",
    "updated_at",
    "finished_at",
    "error",
    "failure_phase",
    "failed_node",
    "lease_holder",
    "lease_expires_at",
    "cancel_requested",
    "last_seq",
)
"""The runs table's columns, in its order."""
LEGACY_TABLES = ("checkpoints", "writes")
"""LangGraph's checkpoint tables: a database holding them is refused by the store."""

_PREFIX = "sqlite:///"


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///PATH`` URL (four slashes for an absolute path)."""
    rest = url.split("://", 1)[1].partition("?")[0]
    return Path(rest[1:])


def _plain_file_url(url: str) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL without options, if it exists; else ``None``."""
    if not url.startswith(_PREFIX) or "?" in url:
        return None
    path = sqlite_path(url)
    if str(path) in ("", ":memory:") or not path.is_file():
        return None
    return path


def _runs_sql(status: str | None, template: str | None) -> str:
    """The store's ``list_runs`` query: the same filters, order and limit."""
    where = [
        condition
        for condition, value in (("status = :status", status), ("template = :template", template))
        if value
    ]
    return (
        f"SELECT {', '.join(RUN_COLUMNS)} FROM {RUNS_TABLE}"
        + (f" WHERE {' AND '.join(where)}" if where else "")
        + " ORDER BY created_at DESC LIMIT :limit"
    )


def _current(conn: sqlite3.Connection) -> bool:
    """Whether the database holds the current schema and no legacy checkpoint tables."""
    names = {
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
            (VERSION_TABLE, *LEGACY_TABLES),
        )
    }
    if names != {VERSION_TABLE}:
        return False
    row: tuple[int | None] = conn.execute(f"SELECT max(version) FROM {VERSION_TABLE}").fetchone()
    return row[0] == SCHEMA_VERSION


def read_runs(
    url: str, *, status: str | None = None, template: str | None = None, limit: int = 100
) -> list[Run] | None:
    """``LedgerStore.list_runs`` on the SQLite file of ``url``, read-only, without SQLAlchemy
    or asyncio; ``None`` when only the store can answer (see the module's docstring)."""
    path = _plain_file_url(url)
    if path is None:
        return None
    params = {"status": status, "template": template, "limit": limit}
    try:
        conn = sqlite3.connect(f"file:{quote(str(path))}?mode=ro", uri=True)
    except sqlite3.Error:
        return None
    try:
        if not _current(conn):
            return None
        cursor = conn.execute(_runs_sql(status, template), params)
        return [Run.from_row(dict(zip(RUN_COLUMNS, row, strict=True))) for row in cursor]
    except (sqlite3.Error, ValueError, TypeError):
        return None
    finally:
        conn.close()
