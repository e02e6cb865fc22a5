"""The Postgres backend: ledger and checkpoints in one database, over one pool.

``postgresql://USER:PASSWORD@HOST:PORT/DB`` takes these options in its query string, beside
libpq's own (``sslmode``, ...):

- ``pool_min_size`` (default 1) and ``pool_max_size`` (default 4): the connection pool. A
  process's transactions go one at a time (the ledger's lock: they number events and take
  staged rows); its reads, and writes of one statement, each take a connection of their own
  beside them, as many at once as the pool holds.
- ``pool_timeout`` (default 30): seconds a call waits for a connection (after the server went
  away, say) before it fails with a ``StorageError``.
- ``prepare=false``: no server-side prepared statements, for poolers that cannot keep them
  (PgBouncer in transaction mode).

Node records and events ride in the checkpoint write's own pipeline (``StagelineSaver`` over
``PgExecutor.write_and_commit``): one round trip and one commit per step, as on SQLite; a
transaction's other writes go with its next statement or its COMMIT. A
connection found dead (the server was restarted) is replaced and the call retried once, where
nothing of it can have committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from sqlalchemy.dialects.postgresql import insert as pg_insert

from stageline.errors import ConfigError, StorageError
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._postgres_pool import PgExecutor, PgLedger, reason
from stageline.ledger._schema import metadata
from stageline.ledger._sql import SqlLedger

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from stageline.ledger._saver import StagelineSaver

__all__ = ["PostgresOptions", "open_postgres"]

CONNECT_TIMEOUT = 10
"""Seconds to wait for a connection to be made (libpq ``connect_timeout``)."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True, kw_only=True)
class PostgresOptions:
    """A ``postgresql://`` URL split into what libpq takes and stageline's own options."""

    conninfo: str
    where: str
    """``host:port/db``, for messages (no credentials)."""
    min_size: int = 1
    max_size: int = 4
    timeout: float = 30.0
    prepare: bool = True

    @classmethod
    def from_url(cls, url: str) -> PostgresOptions:
        parts = urlsplit(url)
        scheme = parts.scheme.split("+", 1)[0]  # postgresql+psycopg:// as SQLAlchemy spells it
        query = dict(parse_qsl(parts.query, keep_blank_values=True))
        try:
            min_size = int(query.pop("pool_min_size", 1))
            max_size = int(query.pop("pool_max_size", max(4, min_size)))
            timeout = float(query.pop("pool_timeout", 30.0))
        except ValueError as exc:
            raise ConfigError(f"a pool option in the database URL is not a number: {exc}") from exc
        if not 0 <= min_size <= max_size or max_size < 1 or timeout <= 0:
            raise ConfigError(
                "the database URL needs 0 <= pool_min_size <= pool_max_size, pool_max_size >= 1 "
                "and pool_timeout > 0"
            )
        prepare = query.pop("prepare", "true").lower()
        if prepare not in _TRUE | _FALSE:
            raise ConfigError(f"prepare={prepare!r} in the database URL; use true or false")
        query.setdefault("connect_timeout", str(CONNECT_TIMEOUT))
        conninfo = parts._replace(scheme=scheme, query=urlencode(query)).geturl()
        try:
            info = conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as exc:
            raise ConfigError(f"invalid Postgres URL: {exc}") from exc
        host = str(info.get("host") or "localhost").split(",")[0]
        port = str(info.get("port") or "5432").split(",")[0]
        db = info.get("dbname") or info.get("user") or "postgres"
        return cls(
            conninfo=conninfo,
            where=f"{host}:{port}/{db}",
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
            prepare=prepare in _TRUE,
        )

    @property
    def connect_kwargs(self) -> dict[str, Any]:
        """What LangGraph's saver needs of every connection (autocommit, dict rows)."""
        return {
            "autocommit": True,
            "row_factory": dict_row,
            "prepare_threshold": 0 if self.prepare else None,
        }


async def open_postgres(
    url: str, serde: SerializerProtocol | None, *, masked: str
) -> tuple[SqlLedger, StagelineSaver | None, Callable[[], Awaitable[None]]]:
    """Connect, migrate the ledger (checkpoint tables included) and check the result.

    Returns the ledger, the saver (None without a ``serde``: a reader's ledger, which does not
    import LangGraph) and the pool's closer. Any failure is a
    ``StorageError`` naming the server (never a fall-back to another backend).
    """
    opts = PostgresOptions.from_url(url)
    try:
        # A connection of its own tells "unreachable" apart from "set-up failed" at once (the
        # pool would keep trying in the background), and checks the schema at the end.
        probe = await psycopg.AsyncConnection.connect(opts.conninfo, autocommit=True)
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot connect to Postgres at {opts.where} ({masked}): {reason(exc)}\n"
            "is the server running, and is database_url (or STAGELINE_DATABASE_URL) right?"
        ) from exc
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        opts.conninfo,
        min_size=opts.min_size,
        max_size=opts.max_size,
        open=False,
        kwargs=opts.connect_kwargs,
        name=f"stageline {opts.where}",
        timeout=opts.timeout,
    )
    try:
        async with probe:
            await pool.open(wait=True, timeout=CONNECT_TIMEOUT)
            executor = PgExecutor(pool, opts.where)
            ledger = PgLedger(executor, lock=asyncio.Lock(), upsert=pg_insert, url=url)
            await ledger.setup()
            await _check_schema(probe, opts.where)
            saver = None
            if serde is not None:
                from stageline.ledger._saver import StagelineSaver

                saver = StagelineSaver(ledger, serde=serde)
    except BaseException as exc:
        await pool.close()
        if isinstance(exc, psycopg.Error):
            raise StorageError(
                f"cannot set up the Postgres database at {opts.where}: {reason(exc)}\n"
                + _setup_hint(exc)
            ) from exc
        raise
    return ledger, saver, pool.close


def _setup_hint(exc: psycopg.Error) -> str:
    state = exc.sqlstate or ""
    if state == "42501":
        return (
            "grant the user CREATE on the schema, or run `stageline db upgrade` once as its owner"
        )
    if state.startswith("42"):
        return (
            "the database holds a half-made or foreign stageline schema: use an empty "
            "database, or repair it and run `stageline db upgrade`"
        )
    return "fix it, then run `stageline db upgrade`"


async def _check_schema(conn: psycopg.AsyncConnection[Any], where: str) -> None:
    """Refuse a half-made schema: every table and column the code expects must be there."""
    expected = {t.name: {c.name for c in t.columns} for t in metadata.sorted_tables}
    cur = await conn.execute(
        "SELECT c.relname, a.attname FROM pg_class c "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = ANY(%s)",
        (list(expected),),
    )
    found: dict[str, set[str]] = {}
    for table, column in await cur.fetchall():
        found.setdefault(table, set()).add(column)
    problems = [f"table {t} is missing" for t in expected if t not in found]
    problems += [
        f"{t} lacks {', '.join(sorted(cols - found[t]))}"
        for t, cols in expected.items()
        if t in found and cols - found[t]
    ]
    cur = await conn.execute("SELECT max(version) FROM stageline_schema_version")
    row = await cur.fetchone()
    version = int(row[0] or 0) if row else 0
    if version > len(MIGRATIONS):
        problems.append(
            f"its ledger schema is version {version}, newer than this stageline "
            f"knows ({len(MIGRATIONS)}); upgrade stageline"
        )
    if problems:
        raise StorageError(
            f"the Postgres database at {where} has a half-made or foreign stageline schema: "
            + "; ".join(problems)
        )
