"""What only the Postgres backend has to get right: its set-up, its errors, its pool.

The behaviour every backend shares is in ``test_ledger_conformance.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import psycopg
import pytest
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.schema import CreateTable

from stageline.checkpoints import checkpoint_serde
from stageline.errors import ConfigError, StorageError
from stageline.ledger import (
    Event,
    NodeRecord,
    NodeStatus,
    Run,
    RunStatus,
    ThreadMeta,
    _sql_staging,
    open_backend,
)
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._postgres import PostgresOptions
from stageline.ledger._schema import schema_version
from stageline.ledger._sql import SqlLedger
from stageline.runner import Runner
from stageline.templates import Template


def make_run() -> Run:
    return Run(
        run_id=f"r-{uuid.uuid4().hex[:10]}",
        template="tpl",
        template_version="1",
        status=RunStatus.QUEUED,
    )


Admin = Callable[[], psycopg.Connection[Any]]


@pytest.fixture
def terminate(postgres_admin: Admin) -> Callable[[str], int]:
    """Kills every server process connected to a URL's database, as a restart would."""

    def kill(url: str) -> int:
        db = url.rsplit("/", 1)[1].split("?")[0]
        with postgres_admin() as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (db,),
            ).fetchall()
        return len(rows)

    return kill


# -- reaching the server ----------------------------------------------------------------------


async def test_an_unreachable_server_is_a_storage_error_naming_the_host_not_the_password() -> None:
    with pytest.raises(StorageError) as info:
        await open_backend("postgresql://stageline:s3cret@127.0.0.1:1/ledger", checkpoint_serde())
    text = str(info.value)
    assert "127.0.0.1:1/ledger" in text
    assert "s3cret" not in text
    assert "stageline:***@" in text
    assert len(text.splitlines()) <= 2
    assert info.value.exit_code == 6


def test_url_options_are_parsed_and_kept_from_libpq() -> None:
    opts = PostgresOptions.from_url(
        "postgresql+psycopg://u:p@db.example:6543/app?prepare=false&pool_max_size=9"
        "&pool_min_size=2&sslmode=disable"
    )
    assert opts.where == "db.example:6543/app"
    assert (opts.min_size, opts.max_size, opts.prepare) == (2, 9, False)
    assert opts.connect_kwargs["prepare_threshold"] is None
    assert "prepare" not in opts.conninfo and "pool_" not in opts.conninfo
    assert opts.conninfo.startswith("postgresql://") and "sslmode=disable" in opts.conninfo
    assert PostgresOptions.from_url("postgres://h/db").connect_kwargs["prepare_threshold"] == 0
    for bad in ("?prepare=maybe", "?pool_max_size=x", "?pool_min_size=5&pool_max_size=2"):
        with pytest.raises(ConfigError):
            PostgresOptions.from_url(f"postgresql://h/db{bad}")


# -- set-up -----------------------------------------------------------------------------------


async def test_processes_starting_at_once_set_up_an_empty_database_once(
    postgres_empty_url: str,
) -> None:
    opened = await asyncio.gather(
        *[open_backend(postgres_empty_url, checkpoint_serde()) for _ in range(3)]
    )
    try:
        assert [await b.ledger.schema_version() for b in opened] == [len(MIGRATIONS)] * 3
    finally:
        for backend in opened:
            await backend.aclose()
    with psycopg.connect(postgres_empty_url) as conn:
        versions = [
            v
            for (v,) in conn.execute(
                "SELECT version FROM stageline_schema_version ORDER BY version"
            )
        ]
    assert versions == list(range(1, len(MIGRATIONS) + 1))


async def test_a_database_at_the_previous_schema_is_upgraded(postgres_empty_url: str) -> None:
    dialect = psycopg_dialect()
    with psycopg.connect(postgres_empty_url, autocommit=True) as conn:
        conn.execute(str(CreateTable(schema_version).compile(dialect=dialect)))
        for number, migration in enumerate(MIGRATIONS[:-1], start=1):
            for stmt in migration(dialect):
                conn.execute(stmt)
            conn.execute("INSERT INTO stageline_schema_version VALUES (%s, 0)", (number,))
    opened = await open_backend(postgres_empty_url, checkpoint_serde())
    try:
        assert await opened.ledger.schema_version() == len(MIGRATIONS)
        run = make_run()
        await opened.ledger.create_run(run, events=[Event(run_id=run.run_id, kind="run.queued")])
        assert [e.seq for e in await opened.ledger.events(run.run_id)] == [1]
    finally:
        await opened.aclose()


async def test_a_half_made_schema_is_refused_loudly(postgres_empty_url: str) -> None:
    with psycopg.connect(postgres_empty_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE stageline_runs (run_id VARCHAR(64) PRIMARY KEY)")
    with pytest.raises(StorageError) as info:
        await open_backend(postgres_empty_url, checkpoint_serde())
    assert "half-made" in str(info.value) and "status" in str(info.value)


async def test_tables_with_missing_columns_are_named(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("ALTER TABLE stageline_events DROP COLUMN level")
    with pytest.raises(StorageError) as info:
        await open_backend(postgres_url, checkpoint_serde())
    assert "stageline_events lacks level" in str(info.value)


async def test_a_schema_newer_than_this_stageline_is_refused(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("INSERT INTO stageline_schema_version VALUES (99, 0)")
    with pytest.raises(StorageError, match="version 99, newer"):
        await open_backend(postgres_url, checkpoint_serde())


@pytest.fixture
def unprivileged_url(postgres_empty_url: str, postgres_admin: Admin) -> Iterator[str]:
    """The empty database, as a user who may connect but not create tables."""
    role = f"stageline_ro_{uuid.uuid4().hex[:8]}"
    with postgres_admin() as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
    with psycopg.connect(postgres_empty_url, autocommit=True) as conn:
        conn.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
    url = postgres_empty_url.replace("://", f"://{role}:pw@", 1).replace("postgres@", "", 1)
    try:
        yield url
    finally:
        with psycopg.connect(postgres_empty_url, autocommit=True) as conn:
            conn.execute(f'DROP OWNED BY "{role}"')
        with postgres_admin() as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,)
            )
            admin.execute(f'DROP ROLE "{role}"')


async def test_a_user_without_create_rights_gets_a_set_up_error_not_a_fall_back(
    unprivileged_url: str,
) -> None:
    with pytest.raises(StorageError) as info:
        await open_backend(unprivileged_url, checkpoint_serde())
    text = str(info.value)
    assert text.startswith("cannot set up the Postgres database at")
    assert "permission denied" in text
    assert ":pw@" not in text


# -- the hot path -----------------------------------------------------------------------------


class _S(TypedDict, total=False):
    n: int
    seen: dict[str, Any]


_DB: dict[str, str] = {}


def _count_committed(url: str, run_id: str) -> dict[str, Any]:
    with psycopg.connect(url) as conn:
        nodes = dict(
            conn.execute(
                "SELECT node, status FROM stageline_node_records WHERE run_id = %s", (run_id,)
            ).fetchall()
        )
        kinds = [
            k
            for (k,) in conn.execute(
                "SELECT kind FROM stageline_events WHERE run_id = %s ORDER BY seq", (run_id,)
            )
        ]
        row = conn.execute(
            "SELECT COUNT(*) FROM stageline_checkpoints WHERE thread_id = %s", (run_id,)
        ).fetchone()
    return {"nodes": nodes, "kinds": kinds, "checkpoints": row[0] if row else 0}


async def _first(state: _S, ctx: Any) -> dict[str, Any]:
    return {"n": 1}


async def _second(state: _S, ctx: Any) -> dict[str, Any]:
    # Another connection, mid-run: the first node's rows must be committed already, by the
    # checkpoint write that followed it (the flush timer is off: see the test).
    return {"seen": await asyncio.to_thread(_count_committed, _DB["url"], ctx.run_id)}


async def test_staged_rows_commit_with_the_checkpoint(
    tmp_path: Path, settings_for: Any, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sql_staging, "FLUSH_DELAY", 3600.0)  # only checkpoint writes commit
    _DB["url"] = postgres_url
    template = Template("commit_check", state=_S)
    template.add_stage("first", _first).add_stage("second", _second)
    template.add_edge("first", "second")
    async with Runner.open(settings_for(postgres_url)) as runner:
        summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    seen = summary.state["seen"]
    assert seen["nodes"]["first"] == "succeeded"
    assert seen["kinds"][:2] == ["run.started", "node.started"]
    assert "node.succeeded" in seen["kinds"]
    assert seen["checkpoints"] >= 2
    after = _count_committed(postgres_url, summary.run.run_id)
    assert after["nodes"] == {"first": "succeeded", "second": "succeeded"}
    assert len(after["kinds"]) == summary.run.last_seq
    assert after["kinds"][-1] == "run.succeeded"


async def test_a_failed_checkpoint_write_keeps_the_staged_rows_for_the_next_one(
    postgres_url: str,
) -> None:
    backend = await open_backend(postgres_url, checkpoint_serde())
    try:
        run = make_run()
        await backend.ledger.create_run(run)
        backend.ledger.stage_node(
            NodeRecord(
                run_id=run.run_id,
                task_id="t",
                attempt=1,
                try_no=1,
                node="n",
                stage="m:n",
                status=NodeStatus.RUNNING,
                started_at=time.time(),
            )
        )
        config: Any = {"configurable": {"thread_id": run.run_id, "checkpoint_ns": ""}}
        broken: Any = {"id": None, "channel_values": {}}  # NOT NULL: fails at the commit
        with pytest.raises(psycopg.errors.NotNullViolation):
            await backend.saver.aput(config, broken, {}, {})
        assert await backend.ledger.node_records(run.run_id) == []
        await backend.ledger.flush()
        assert len(await backend.ledger.node_records(run.run_id)) == 1
    finally:
        await backend.aclose()


# -- the pool ---------------------------------------------------------------------------------


async def test_connections_killed_under_the_pool_are_replaced_and_the_call_retried(
    settings_for: Any, postgres_url: str, terminate: Callable[[str], int]
) -> None:
    template = Template("pair", state=_S).add_stage("first", _first)
    async with Runner.open(settings_for(postgres_url + "?pool_min_size=2")) as runner:
        before = await runner.start(template, {})
        assert terminate(postgres_url) >= 1
        assert (await runner.ledger.get_run(before.run.run_id)).status is RunStatus.SUCCEEDED
        assert terminate(postgres_url) >= 1
        after = await runner.start(template, {})  # the saver's first call meets a dead one
        assert after.status is RunStatus.SUCCEEDED
        assert terminate(postgres_url) >= 1
        assert (await runner.status(after.run.run_id)).state == {"n": 1}


async def test_a_server_gone_for_good_is_a_storage_error_naming_the_host(
    postgres_url: str, postgres_admin: Admin, terminate: Callable[[str], int]
) -> None:
    db = postgres_url.rsplit("/", 1)[1]
    backend = await open_backend(postgres_url + "?pool_timeout=1", checkpoint_serde())
    try:
        with postgres_admin() as admin:
            admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS false')
        terminate(postgres_url)
        with pytest.raises(StorageError) as info:
            await backend.ledger.list_runs()
        assert PostgresOptions.from_url(postgres_url).where in str(info.value)
        with pytest.raises(StorageError):
            await backend.saver.aget_tuple({"configurable": {"thread_id": "x"}})
    finally:
        with postgres_admin() as admin:
            admin.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS true')
        await backend.aclose()


async def test_without_prepared_statements_for_poolers(
    settings_for: Any, postgres_url: str
) -> None:
    template = Template("pair", state=_S).add_stage("first", _first)
    async with Runner.open(settings_for(postgres_url + "?prepare=false")) as runner:
        summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT count(*) FROM stageline_node_records").fetchone()
    assert row is not None and row[0] == 1


async def test_a_cancelled_ledger_call_leaves_its_connection_idle(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    backend = await open_backend(postgres_url, checkpoint_serde())
    try:
        run = await backend.ledger.create_run(make_run())
        # Cancelled at one point or another (a few times out of a hundred, while psycopg enters
        # pipeline mode: the connection once stayed in it, and a later block's COMMIT was lost).
        for delay in (0, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.003) * 40:
            call = asyncio.ensure_future(backend.ledger.renew_lease(run.run_id, "h", 10))
            await asyncio.sleep(delay)
            call.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await call
        assert (await backend.ledger.get_run(run.run_id)).status is RunStatus.QUEUED
    finally:
        await backend.aclose()
    assert "returned connection" not in caplog.text  # the pool had nothing to clean up


# -- what waits for the ledger's lock -----------------------------------------------------------


async def test_reads_and_one_statement_writes_do_not_wait_for_a_transaction(
    postgres_url: str,
) -> None:
    """A process's transactions go one at a time (they number events, take staged rows); its
    reads and its writes of one statement take connections of their own beside them."""
    backend = await open_backend(postgres_url, checkpoint_serde())
    ledger = backend.ledger
    try:
        run = await ledger.create_run(make_run())
        async with ledger.lock:  # a transaction of this process in flight
            found = await asyncio.wait_for(ledger.get_run(run.run_id), 30)
            made = await asyncio.wait_for(
                ledger.put_thread(ThreadMeta(run_id=f"t-{uuid.uuid4().hex[:8]}")), 30
            )
        assert found.run_id == run.run_id
        assert await ledger.thread_meta(made.run_id) == made
    finally:
        await backend.aclose()


async def test_a_transactions_writes_go_with_its_commit_and_fail_it_whole(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Writes nobody reads back wait for the transaction's next statement or its COMMIT; one
    that fails there fails the whole transaction, and the connection goes back clean."""
    table = f"scratch_{uuid.uuid4().hex[:8]}"
    insert = f"INSERT INTO {table} (a) VALUES (%(a)s)"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (a int PRIMARY KEY)")
    backend = await open_backend(postgres_url + "?pool_max_size=1", checkpoint_serde())
    ledger = backend.ledger
    assert isinstance(ledger, SqlLedger)
    try:
        with pytest.raises(psycopg.errors.UniqueViolation):
            async with ledger._tx() as x:
                await x.execute_many(insert, [{"a": 1}, {"a": 2}])
                await x.execute_many(insert, [{"a": 1}])  # fails at the COMMIT
        async with ledger._tx() as x:
            await x.execute_many(insert, [{"a": 3}])
            await x.execute_many(insert, [{"a": 4}])
            seen = await x.fetch(f"SELECT count(*) AS n FROM {table}", {})  # sent with them
        assert seen == [{"n": 2}]
        async with ledger._read() as x:
            rows = await x.fetch(f"SELECT a FROM {table} ORDER BY a", {})
        assert [r["a"] for r in rows] == [3, 4]
    finally:
        await backend.aclose()
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute(f"DROP TABLE {table}")
    assert "returned connection" not in caplog.text  # the pool had nothing to clean up
