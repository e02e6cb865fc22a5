"""One statement on a ledger's database from outside stageline, as another process would."""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg


def raw_sql(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Run ``sql`` (``?`` placeholders) on the SQLite file or Postgres database ``url`` names, in
    a connection of its own, committed; the rows it returns (none for a write)."""
    if url.startswith("sqlite"):
        db = sqlite3.connect(url.split(":///", 1)[1])
        try:
            with db:
                return db.execute(sql, params).fetchall()
        finally:
            db.close()
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql.replace("?", "%s"), params)
        return list(cur.fetchall()) if cur.description else []
