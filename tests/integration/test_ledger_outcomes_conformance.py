"""Capability outcomes on every ledger backend (``BACKEND_URLS``), the in-memory double included."""

from __future__ import annotations

import uuid
from typing import Any, TypedDict

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import (
    Backend,
    LedgerStore,
    NodeRecord,
    NodeStatus,
    Outcome,
    Run,
    RunStatus,
    open_backend,
)
from stageline.ledger._migrations import MIGRATIONS
from stageline.runner import Runner
from stageline.stages import StageContext, stage
from stageline.templates import Template


def uid(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def outcome(
    template: str,
    *,
    run_id: str | None = None,
    node: str = "n",
    task: str = "t1",
    finished: float = 1000.0,
    **kw: Any,
) -> Outcome:
    fields: dict[str, Any] = {"status": "succeeded", "latency": 1.0, "stage": f"mod:{node}"}
    fields.update(kw)
    return Outcome(
        run_id=run_id or uid(),
        task_id=task,
        template=template,
        node=node,
        started_at=finished - fields["latency"],
        finished_at=finished,
        **fields,
    )


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def test_schema_has_the_outcomes_migration(ledger: LedgerStore) -> None:
    assert await ledger.schema_version() == len(MIGRATIONS) >= 3


async def test_outcomes_round_trip_every_field_and_filter(ledger: LedgerStore) -> None:
    tpl, other = uid("tpl"), uid("tpl")
    full = outcome(
        tpl,
        node="draft",
        capability="writing",
        alternative="a",
        input_shape="abc",
        status="failed",
        failure_phase="timeout",
        latency=2.5,
        input_tokens=10.0,
        output_tokens=5.0,
        cost=0.25,
        quality=0.75,
        finished=2000.0,
        attempt=2,
        try_no=3,
    )
    old = outcome(tpl, node="outline", finished=1000.0)
    elsewhere = outcome(other, finished=3000.0)
    await ledger.record_outcomes([full, old, elsewhere])

    assert await ledger.outcomes(template=tpl) == [old, full]
    assert await ledger.outcomes(template=tpl, since=1500.0) == [full]
    assert await ledger.outcomes(template=tpl, node="outline") == [old]
    assert await ledger.outcomes(template=tpl, routed=True) == [full]
    assert await ledger.outcomes(template=tpl, limit=1) == [full]  # the newest
    assert full.tokens == 15.0


async def test_staged_outcomes_are_written_with_the_next_flush_and_upsert(
    ledger: LedgerStore,
) -> None:
    tpl = uid("tpl")
    row = outcome(tpl, status="failed", failure_phase="stage")
    ledger.stage_outcome(row)
    again = outcome(tpl, run_id=row.run_id, status="succeeded", finished=1001.0)
    ledger.stage_outcome(again)  # the same node run: the later row wins
    await ledger.flush()
    assert await ledger.outcomes(template=tpl) == [again]


async def test_outcomes_survive_deleting_their_run(ledger: LedgerStore) -> None:
    tpl = uid("tpl")
    run = Run(run_id=uid(), template=tpl, template_version="1", status=RunStatus.SUCCEEDED)
    await ledger.create_run(run)
    ledger.stage_node(
        NodeRecord(
            run_id=run.run_id,
            task_id="t1",
            attempt=1,
            try_no=1,
            node="n",
            stage="m:n",
            status=NodeStatus.SUCCEEDED,
            started_at=1.0,
        )
    )
    await ledger.record_outcomes([outcome(tpl, run_id=run.run_id)])
    await ledger.flush()
    await ledger.delete_run(run.run_id)  # what retention (prune) does
    assert await ledger.node_records(run.run_id) == []
    assert [o.run_id for o in await ledger.outcomes(template=tpl)] == [run.run_id]


class S(TypedDict, total=False):
    topic: str
    text: str


@stage(name="outcomes_test.write", capability="writing", register=False)
async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    ctx.metric("input_tokens", 7)
    ctx.metric("output_tokens", 3)
    ctx.metric("cost", 0.01)
    ctx.metric("quality", 0.8)
    return {"text": state.get("topic", "") + "!"}


@stage(name="outcomes_test.broken", capability="checking", register=False)
async def broken(state: S, ctx: StageContext) -> dict[str, Any]:
    raise RuntimeError("no")


async def test_a_run_records_one_outcome_per_node_run(backend_url: str, settings_for: Any) -> None:
    name = uid("outcomes")
    tpl = Template(name, state=S).add_stage("write", write).add_stage("check", broken)
    tpl.add_edge("write", "check")
    async with Runner.open(settings_for(backend_url)) as runner:
        done = await runner.start(tpl, {"topic": "x"})
        assert done.status is RunStatus.FAILED
        rows = await runner.ledger.outcomes(template=name)
    assert [(o.node, o.status, o.capability) for o in rows] == [
        ("write", "succeeded", "writing"),
        ("check", "failed", "checking"),
    ]
    first, second = rows
    assert (first.input_tokens, first.output_tokens, first.cost, first.quality) == (
        7.0,
        3.0,
        0.01,
        0.8,
    )
    assert first.run_id == done.run.run_id and first.latency >= 0
    assert second.failure_phase == "stage" and second.quality is None
    assert first.input_shape and second.input_shape != first.input_shape  # `text` was added


async def test_an_older_database_is_upgraded_to_the_outcomes_table(tmp_path: Any) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    from sqlalchemy.dialects import sqlite as sqlite_dialect

    from stageline.ledger._schema import schema_version

    dialect = sqlite_dialect.dialect()
    from sqlalchemy.schema import CreateTable

    db.execute(str(CreateTable(schema_version).compile(dialect=dialect)))
    for number, migration in enumerate(MIGRATIONS[:2], start=1):
        for stmt in migration(dialect):
            db.execute(stmt)
        db.execute("INSERT INTO stageline_schema_version VALUES (?, 0)", (number,))
    db.commit()
    db.close()
    opened = await open_backend(f"sqlite:///{path}", checkpoint_serde())
    try:
        assert await opened.ledger.schema_version() == len(MIGRATIONS)
        await opened.ledger.record_outcomes([outcome("t")])
        assert len(await opened.ledger.outcomes(template="t")) == 1
    finally:
        await opened.aclose()
