"""Lineage rows on every ledger backend (``BACKEND_URLS``), the in-memory double included."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest
from sqlalchemy.dialects import sqlite as sqlite_dialect
from sqlalchemy.schema import CreateTable

from stageline.checkpoints import checkpoint_serde
from stageline.errors import InvalidTransition, RunNotFound
from stageline.ledger import Backend, Event, LedgerStore, Lineage, Run, RunStatus, open_backend
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._schema import schema_version


def uid(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _run(run_id: str) -> Run:
    return Run(run_id=run_id, template="t", template_version="1", status=RunStatus.QUEUED)


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def test_a_fork_is_created_with_its_lineage_and_listed_under_its_parent(
    ledger: LedgerStore,
) -> None:
    parent, first, second = uid("p"), uid("f"), uid("f")
    await ledger.create_run(_run(parent))
    assert await ledger.lineage(parent) is None and await ledger.forks(parent) == []
    one = Lineage(
        run_id=first,
        parent_run_id=parent,
        parent_step=3,
        parent_checkpoint_id="c3",
        created_at=100.0,
    )
    two = Lineage(
        run_id=second,
        parent_run_id=parent,
        parent_step=None,
        parent_checkpoint_id="c0",
        created_at=200.0,
    )
    await ledger.create_run(
        _run(second), lineage=two, events=[Event(run_id=second, kind="run.forked")]
    )
    await ledger.create_run(_run(first), lineage=one)
    assert await ledger.lineage(first) == one
    assert await ledger.lineage(second) == two
    assert await ledger.forks(parent) == [one, two]  # oldest first
    assert [e.kind for e in await ledger.events(second)] == ["run.forked"]


async def test_a_refused_run_leaves_no_lineage_and_deleting_a_run_drops_its_own(
    ledger: LedgerStore,
) -> None:
    parent, child = uid("p"), uid("c")
    await ledger.create_run(_run(parent))
    with pytest.raises(InvalidTransition):  # the id is taken: nothing of the fork is kept
        await ledger.create_run(
            _run(parent),
            lineage=Lineage(
                run_id=parent, parent_run_id=child, parent_step=1, parent_checkpoint_id="x"
            ),
        )
    assert await ledger.lineage(parent) is None and await ledger.forks(child) == []

    row = Lineage(run_id=child, parent_run_id=parent, parent_step=2, parent_checkpoint_id="c")
    await ledger.create_run(_run(child), lineage=row)
    await ledger.delete_run(parent)  # the fork keeps naming where it came from
    assert await ledger.lineage(child) == row
    await ledger.delete_run(child)
    assert await ledger.lineage(child) is None and await ledger.forks(parent) == []
    with pytest.raises(RunNotFound):
        await ledger.get_run(child)


async def test_a_database_made_before_lineage_is_upgraded_and_keeps_its_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    dialect = sqlite_dialect.dialect()
    db.execute(str(CreateTable(schema_version).compile(dialect=dialect)))
    before = next(
        i
        for i, m in enumerate(MIGRATIONS)  # the lineage migration, wherever it is
        if any("stageline_lineage" in stmt for stmt in m(dialect))
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
        row = Lineage(run_id="new", parent_run_id="old", parent_step=1, parent_checkpoint_id="c")
        await ledger.create_run(_run("new"), lineage=row)
        assert await ledger.forks("old") == [row]
    finally:
        await opened.aclose()
