"""``copy_database``: SQLite to Postgres (and back), every ledger table, checkpoints untouched."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.types import interrupt
from pydantic import BaseModel
from sqlalchemy import func, select

from stageline.checkpoints import checkpoint_serde
from stageline.config import Settings
from stageline.errors import LeaseHeld
from stageline.ledger import RunStatus, copy_database, open_backend
from stageline.ledger._schema import metadata, schema_version
from stageline.runner import Runner
from stageline.templates import Template

FAIL: set[str] = set()


class Finding(BaseModel):
    claim: str


class S(TypedDict, total=False):
    finding: Any
    kind: str
    trail: Annotated[list[str], operator.add]


async def inspect(state: S, ctx: Any) -> dict[str, Any]:
    if "inspect" in FAIL:
        raise RuntimeError("not yet")
    return {"kind": type(state["finding"]).__name__, "trail": ["inspect"]}


async def ask(state: S, ctx: Any) -> dict[str, Any]:
    return {"trail": [str(interrupt({"question": "go on?"}))]}


def findings() -> Template:
    return Template("findings", state=S, checkpoint_types=[Finding]).add_stage("inspect", inspect)


def asks() -> Template:
    template = Template("asks", state=S, checkpoint_types=[Finding])
    template.add_stage("ask", ask).add_stage("inspect", inspect)
    return template.add_edge("ask", "inspect")


async def table_counts(url: str) -> dict[str, int]:
    backend = await open_backend(url, checkpoint_serde())
    try:
        ledger: Any = backend.ledger
        counts = {}
        for table in metadata.sorted_tables:
            if table is schema_version:
                continue
            compiled = (
                select(func.count().label("n"))
                .select_from(table)
                .compile(dialect=ledger._x.dialect)
            )
            async with ledger._read() as x:
                counts[table.name] = (await x.fetch(str(compiled), compiled.params))[0]["n"]
        return counts
    finally:
        await backend.aclose()


@pytest.fixture(autouse=True)
def _reset() -> None:
    FAIL.clear()


async def test_registered_types_cross_over_unchanged_and_the_run_retries_there(
    sqlite_settings: Settings,
    postgres_settings: Settings,
) -> None:
    FAIL.add("inspect")
    async with Runner.open(sqlite_settings) as runner:
        failed = await runner.start(findings(), {"finding": Finding(claim="x")})
        waiting = await runner.start(asks(), {"finding": Finding(claim="y")})
        daily = await runner.schedules.add("blog_post", "0 9 * * *", inputs={"topic": "t"})
        fired = await runner.schedules.add("blog_post", "0 9 * * *", inputs={"topic": "t"}, now=0)
        [fired_run] = await runner.schedules.fire_due(now=9 * 3600)  # schedules go along
    assert (failed.status, waiting.status) == (RunStatus.FAILED, RunStatus.WAITING)

    report = await copy_database(sqlite_settings.database_url, postgres_settings.database_url)
    assert report.tables["stageline_runs"] == 3  # the schedule's run too (queued)
    assert report.checkpoints >= 2 and report.writes >= 1
    counts = await table_counts(sqlite_settings.database_url)
    assert await table_counts(postgres_settings.database_url) == counts
    assert counts["stageline_node_records"] >= 1
    assert counts["stageline_crons"] == 2 and counts["stageline_cron_fires"] == 1

    FAIL.clear()
    async with Runner.open(postgres_settings) as runner:
        runner.load(findings())
        summary = await runner.retry(failed.run.run_id)
        assert summary.status is RunStatus.SUCCEEDED
        assert summary.state["finding"] == Finding(claim="x")  # revived by the allowlist there
        assert summary.state["kind"] == "Finding"
        runner.load(asks())
        seen = await runner.status(waiting.run.run_id)
    assert seen.status is RunStatus.WAITING
    assert seen.state["finding"] == Finding(claim="y")
    async with Runner.open(postgres_settings) as runner:
        assert await runner.ledger.cron(daily.cron_id) == daily
        assert await runner.ledger.fired_by(fired_run) == fired.cron_id


async def test_and_back_from_postgres_to_a_new_sqlite_file(
    tmp_path: Path, postgres_settings: Settings
) -> None:
    async with Runner.open(postgres_settings) as runner:
        done = await runner.start(findings(), {"finding": Finding(claim="z")})
    target = f"sqlite:///{tmp_path / 'back.db'}"
    report = await copy_database(postgres_settings.database_url, target)
    assert report.tables["stageline_runs"] == 1
    backend = await open_backend(target, checkpoint_serde())
    try:
        assert await backend.ledger.get_run(done.run.run_id) == done.run
        assert await backend.ledger.node_records(done.run.run_id) == done.records
    finally:
        await backend.aclose()


@pytest.mark.timeout(50)  # refused at once: waiting out the 60 s lease would time out
async def test_a_run_that_a_live_process_advances_is_not_copied(
    sqlite_settings: Settings, postgres_settings: Settings
) -> None:
    async with Runner.open(sqlite_settings) as runner:
        run = await runner.create(findings(), {"finding": Finding(claim="x")})
        await runner.ledger.acquire_lease(run.run_id, "elsewhere:1:abc", 60)
    with pytest.raises(LeaseHeld) as info:
        await copy_database(sqlite_settings.database_url, postgres_settings.database_url)
    assert "elsewhere" in str(info.value)
    assert await table_counts(postgres_settings.database_url) == dict.fromkeys(
        await table_counts(postgres_settings.database_url), 0
    )
