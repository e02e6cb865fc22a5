"""Hostile names and values on real databases (a SQLite file, the Postgres server): inputs JSON
cannot hold leave no run behind, and rows whose run id is a path are refused by the workers and
by ``db copy``."""

from __future__ import annotations

import contextlib
import datetime
import logging
import math
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stageline.config import Settings
from stageline.errors import InputError
from stageline.ledger import RunStatus, copy_database
from stageline.runner import Runner
from stageline.worker import run_local_worker
from stageline.worker._queue import advance_run

HOSTILE_INPUTS: list[dict[str, Any]] = [
    {"topic": math.nan},
    {"topic": math.inf},
    {"topic": "a\x00b"},
    {"to\x00pic": "a"},
    {"topic": {"nested": ["ok", "bad\x00"]}},
    {"topic": "\ud800"},
    {"topic": {1, 2}},
    {"topic": datetime.datetime(2024, 1, 1)},
    {"topic": b"raw"},
    {"topic": {1: "a"}},
]


HOSTILE_IDS = [
    "nan",
    "inf",
    "nul-in-value",
    "nul-in-key",
    "nul-nested",
    "lone-surrogate",
    "set",
    "datetime",
    "bytes",
    "int-key",
]
"""Plain ids: ``repr`` ids holding escapes are not found again by id (mutmut selects by id)."""


@pytest.mark.parametrize("inputs", HOSTILE_INPUTS, ids=HOSTILE_IDS)
async def test_inputs_json_cannot_hold_leave_no_run(
    shared_backend_url: str, settings_for: Callable[[str], Settings], inputs: dict[str, Any]
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        with pytest.raises(InputError, match=r"input (name )?'(topic|to\\x00pic)'"):
            await runner.start("blog_post", inputs)
        with pytest.raises(InputError):
            await runner.create("blog_post", inputs, run_id="queued1")
        assert await runner.ledger.list_runs() == []


async def test_a_long_run_id_is_refused_before_the_column_is_reached(
    shared_backend_url: str, settings_for: Callable[[str], Settings]
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        with pytest.raises(InputError, match="not a valid run id"):
            await runner.start("blog_post", {"topic": "a"}, run_id="r" * 65)
        assert await runner.ledger.list_runs() == []


def _sql(url: str, *statements: str) -> None:
    """Run statements straight on the database, as something other than stageline would."""
    if url.startswith("sqlite"):
        with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            for statement in statements:
                db.execute(statement)
            db.commit()
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            for statement in statements:
                conn.execute(statement)  # type: ignore[arg-type]


def _plant_bad_row(url: str, good: str, bad: str) -> None:
    """A copy of run ``good``'s row under the run id ``bad``."""
    _sql(
        url,
        f"CREATE TEMP TABLE planted AS SELECT * FROM stageline_runs WHERE run_id = '{good}'",
        f"UPDATE planted SET run_id = '{bad}'",
        "INSERT INTO stageline_runs SELECT * FROM planted",
    )


async def test_the_local_worker_refuses_a_queued_run_whose_id_is_a_path(
    tmp_path: Path,
    settings_for: Callable[[str], Settings],
    caplog: pytest.LogCaptureFixture,
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    settings = settings_for(url)
    async with Runner.open(settings) as runner:
        await runner.create("blog_post", {"topic": "a"}, run_id="good1")
    escape = tmp_path / "project" / ".." / "escape"
    _plant_bad_row(url, "good1", "../../../escape")
    caplog.set_level(logging.ERROR, logger="stageline.worker")
    assert await run_local_worker(settings=settings, idle_exit=0.3)
    async with Runner.open(settings) as runner:
        assert (await runner.ledger.get_run("good1")).status is RunStatus.WAITING  # advanced
        statuses = {r.run_id: r.status for r in await runner.ledger.list_runs()}
    assert statuses["../../../escape"] is RunStatus.QUEUED  # never advanced
    assert any("refusing queued run '../../../escape'" in r.getMessage() for r in caplog.records)
    assert not escape.exists() and not (settings.home.parent.parent / "escape").exists()
    runs = settings.home / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["good1"]


async def test_a_queued_job_whose_id_is_a_path_is_refused_not_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.ERROR, logger="stageline.worker")
    context: Any = None  # refused before the job's context is looked at
    assert await advance_run(context, "/some/dir") == "refused: not a valid run id"
    assert "refusing job for run '/some/dir'" in caplog.text


async def test_db_copy_refuses_a_source_holding_a_run_id_that_is_a_path(
    tmp_path: Path,
    settings_for: Callable[[str], Settings],
    postgres_url: str,
) -> None:
    source = f"sqlite:///{tmp_path / 'ledger.db'}"
    async with Runner.open(settings_for(source)) as runner:
        await runner.create("blog_post", {"topic": "a"}, run_id="good1")
    _plant_bad_row(source, "good1", "../escape")
    with pytest.raises(InputError, match=r"malformed run id '\.\./escape'"):
        await copy_database(source, postgres_url)
    async with Runner.open(settings_for(postgres_url)) as target:
        assert await target.ledger.list_runs() == []
