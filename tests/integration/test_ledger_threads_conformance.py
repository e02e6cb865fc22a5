"""Thread metadata and LangGraph API runs on every ledger backend, the in-memory double too."""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateTable

from stageline.checkpoints import checkpoint_serde
from stageline.errors import InvalidTransition
from stageline.ledger import (
    ApiRun,
    ApiRunStatus,
    Backend,
    LedgerStore,
    Run,
    RunStatus,
    ThreadMeta,
    open_backend,
)
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._schema import schema_version


def uid(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def test_an_empty_thread_is_kept_with_its_metadata_once(ledger: LedgerStore) -> None:
    thread = uid()
    made = await ledger.put_thread(ThreadMeta(run_id=thread, metadata={"team": "docs", "n": 1}))
    found = await ledger.thread_meta(thread)
    assert found == made and found.metadata == {"team": "docs", "n": 1}
    with pytest.raises(InvalidTransition, match="already exists"):
        await ledger.put_thread(ThreadMeta(run_id=thread))
    assert [m.run_id for m in await ledger.thread_metas()].count(thread) == 1
    assert await ledger.thread_meta(uid()) is None


async def test_metadata_is_replaced_and_made_for_a_run_that_had_none(
    ledger: LedgerStore,
) -> None:
    thread = uid()
    await ledger.put_thread(ThreadMeta(run_id=thread, metadata={"a": 1}))
    changed = await ledger.set_thread_metadata(thread, {"a": 2, "b": [1, 2]})
    assert (await ledger.thread_meta(thread)) == changed
    assert changed.metadata == {"a": 2, "b": [1, 2]} and changed.updated_at >= changed.created_at
    other = uid()
    await ledger.set_thread_metadata(other, {"made": True})
    assert (await ledger.thread_meta(other)).metadata == {"made": True}


async def test_api_runs_are_listed_newest_first_and_their_status_is_set(
    ledger: LedgerStore,
) -> None:
    thread = uid()
    first = ApiRun(
        api_run_id=uid("a"),
        run_id=thread,
        assistant_id="blog_post",
        metadata={"why": "start"},
        created_at=10.0,
        updated_at=10.0,
    )
    second = ApiRun(
        api_run_id=uid("a"),
        run_id=thread,
        assistant_id="blog_post",
        created_at=20.0,
        updated_at=20.0,
    )
    await ledger.add_api_run(first)
    await ledger.add_api_run(second)
    await ledger.add_api_run(ApiRun(api_run_id=uid("a"), run_id=uid(), assistant_id="sdlc"))
    assert [r.api_run_id for r in await ledger.api_runs(thread)] == [
        second.api_run_id,
        first.api_run_id,
    ]
    await ledger.set_api_run_status(first.api_run_id, ApiRunStatus.ERROR, "boom")
    found = await ledger.api_run(first.api_run_id)
    assert found is not None
    assert (found.status, found.error, found.metadata) == (
        ApiRunStatus.ERROR,
        "boom",
        {"why": "start"},
    )
    assert found.status.done and not ApiRunStatus.RUNNING.done
    assert await ledger.api_run(uid("a")) is None

    assert await ledger.delete_api_run(first.api_run_id)  # runs.delete: the others stay
    assert await ledger.api_run(first.api_run_id) is None
    assert [r.api_run_id for r in await ledger.api_runs(thread)] == [second.api_run_id]
    assert not await ledger.delete_api_run(first.api_run_id)


async def test_deleting_a_run_deletes_its_thread_rows(ledger: LedgerStore) -> None:
    thread, kept = uid(), uid()
    await ledger.create_run(
        Run(run_id=thread, template="t", template_version="1", status=RunStatus.SUCCEEDED)
    )
    await ledger.put_thread(ThreadMeta(run_id=thread, metadata={"x": 1}))
    await ledger.put_thread(ThreadMeta(run_id=kept))
    await ledger.add_api_run(ApiRun(api_run_id=uid("a"), run_id=thread, assistant_id="t"))
    await ledger.delete_run(thread)
    assert await ledger.thread_meta(thread) is None
    assert await ledger.api_runs(thread) == []
    assert await ledger.thread_meta(kept) is not None


async def test_a_database_made_before_thread_metadata_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    dialect = sqlite_dialect.dialect()
    db.execute(str(CreateTable(schema_version).compile(dialect=dialect)))
    before = next(
        i
        for i, m in enumerate(MIGRATIONS)  # this migration, wherever it is
        if any("stageline_thread_meta" in stmt for stmt in m(dialect))
    )
    for number, migration in enumerate(MIGRATIONS[:before], start=1):
        for stmt in migration(dialect):
            db.execute(stmt)
        db.execute("INSERT INTO stageline_schema_version VALUES (?, 0)", (number,))
    db.execute(
        "INSERT INTO stageline_runs (run_id, template, template_version, status, "
        "attempt, inputs, created_at, updated_at, cancel_requested, last_seq) "
        "VALUES ('old', 't', '1', 'succeeded', 1, '{}', 1, 1, 0, 0)"
    )
    db.commit()
    db.close()
    opened = await open_backend(f"sqlite:///{path}", checkpoint_serde())
    try:
        ledger = opened.ledger
        assert await ledger.schema_version() == len(MIGRATIONS)
        assert (await ledger.get_run("old")).status is RunStatus.SUCCEEDED
        assert await ledger.thread_meta("old") is None
        await ledger.set_thread_metadata("old", {"team": "x"})
        assert (await ledger.thread_meta("old")).metadata == {"team": "x"}
        await ledger.delete_run("old")
        assert await ledger.thread_meta("old") is None
    finally:
        await opened.aclose()


async def test_two_processes_creating_one_thread_at_once_make_it_once(
    shared_backend: Backend, shared_backend_url: str
) -> None:
    """Two ledgers on one database (as two server processes) create the same thread ids at
    once: each id is made once, and the other creation is refused as 'already exists' (never a
    database error); setting metadata of a thread being made at once loses no row either."""
    other = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        ids = [uid() for _ in range(20)]

        async def create(ledger: LedgerStore, thread: str) -> bool:
            try:
                await ledger.put_thread(ThreadMeta(run_id=thread))
            except InvalidTransition as exc:
                assert "already exists" in str(exc)
                return False
            return True

        made = await asyncio.gather(
            *(create(b.ledger, t) for t in ids for b in (shared_backend, other))
        )
        assert [made[2 * i] + made[2 * i + 1] for i in range(len(ids))] == [1] * len(ids)
        tagged = [uid() for _ in range(20)]
        await asyncio.gather(
            *(
                b.ledger.set_thread_metadata(t, {"by": n})
                for t in tagged
                for n, b in enumerate((shared_backend, other))
            )
        )
        for thread in tagged:
            found = await shared_backend.ledger.thread_meta(thread)
            assert found is not None and found.metadata["by"] in (0, 1)
    finally:
        await other.aclose()


async def test_the_latest_checkpoint_id_is_read_without_its_checkpoint(backend: Backend) -> None:
    """What a run about to go on from its thread's state needs to know (where its stream
    starts): the id of the newest checkpoint at the root, None before the first."""
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import empty_checkpoint

    run_id = uid()
    await backend.ledger.create_run(
        Run(run_id=run_id, template="t", template_version="1", status=RunStatus.QUEUED)
    )
    assert await backend.ledger.latest_checkpoint_id(run_id) is None
    assert backend.saver is not None
    config = RunnableConfig(configurable={"thread_id": run_id, "checkpoint_ns": ""})
    saved = []
    for _ in range(2):
        checkpoint = empty_checkpoint()
        config = await backend.saver.aput(config, checkpoint, {"step": len(saved)}, {})
        saved.append(checkpoint["id"])
    inner = RunnableConfig(configurable={"thread_id": run_id, "checkpoint_ns": "sub:1"})
    await backend.saver.aput(inner, empty_checkpoint(), {"step": 0}, {})  # a subgraph's
    assert await backend.ledger.latest_checkpoint_id(run_id) == max(saved) == saved[-1]
