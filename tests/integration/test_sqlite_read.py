"""``read_runs`` (sqlite3 alone, read-only) answers what the store's ``list_runs`` answers on
the same file, and declines (``None``) whenever only the store can answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raw_sql import raw_sql
from sqlite_runs import store_lists, write_runs
from stageline.ledger import Run, RunStatus, read_runs
from stageline.ledger._sqlite_read import SCHEMA_VERSION

pytestmark = pytest.mark.timeout(60)


def _run(run_id: str, template: str, status: RunStatus, created: float, **more: Any) -> Run:
    return Run(
        run_id=run_id,
        template=template,
        template_version="1",
        status=status,
        created_at=created,
        updated_at=created + 1,
        **more,
    )


RUNS = [
    _run("q1", "blog_post", RunStatus.QUEUED, 100.0),
    _run(
        "r1",
        "sdlc",
        RunStatus.RUNNING,
        101.5,
        inputs={"task": "rate limits", "n": 3},
        lease_holder="host:1",
        lease_expires_at=130.0,
        last_seq=4,
    ),
    _run("w1", "blog_post", RunStatus.WAITING, 102.25, inputs={"topic": "pipelines"}, last_seq=19),
    _run("s1", "blog_post", RunStatus.SUCCEEDED, 103.0, finished_at=109.0, last_seq=30),
    _run(
        "f1",
        "sdlc",
        RunStatus.FAILED,
        104.0,
        attempt=2,
        finished_at=105.0,
        error="boom: ü",
        failure_phase="node",
        failed_node="plan",
        last_seq=7,
    ),
    _run("c1", "blog_post", RunStatus.CANCELLED, 105.0, finished_at=106.0, cancel_requested=True),
]

FILTERS = [
    {},
    {"limit": 2},
    {"status": "waiting"},
    {"status": "failed"},
    {"status": "interrupted"},
    {"template": "sdlc"},
    {"template": "nope"},
    {"status": "queued", "template": "blog_post"},
    {"template": "blog_post", "limit": 3},
    {"status": "running", "template": "sdlc", "limit": 1},
]


@pytest.fixture
async def url(tmp_path: Path) -> str:
    """A SQLite ledger made by the store, holding runs of several statuses and templates."""
    made = f"sqlite:///{tmp_path / 'ledger.db'}"
    await write_runs(made, RUNS)
    return made


@pytest.mark.parametrize("wanted", FILTERS, ids=lambda f: ",".join(map(str, f.values())) or "all")
async def test_the_read_path_lists_what_the_store_lists(
    url: str, wanted: dict[str, object]
) -> None:
    read = read_runs(url, **wanted)  # type: ignore[arg-type]
    assert read is not None
    assert [r.to_dict() for r in read] == await store_lists(url, **wanted)


async def test_the_read_path_lists_every_run_newest_first(url: str) -> None:
    read = read_runs(url)
    assert read is not None
    assert [r.run_id for r in read] == ["c1", "f1", "s1", "w1", "r1", "q1"]
    assert read == sorted(RUNS, key=lambda r: -r.created_at)


async def test_an_older_schema_is_left_to_the_store(url: str) -> None:
    raw_sql(url, "DELETE FROM stageline_schema_version WHERE version = ?", SCHEMA_VERSION)
    assert read_runs(url) is None
    assert len(await store_lists(url)) == len(RUNS)  # the store migrates it, then lists


async def test_a_database_with_langgraphs_tables_is_left_to_the_store(url: str) -> None:
    raw_sql(url, "CREATE TABLE checkpoints (thread_id TEXT)")
    assert read_runs(url) is None


@pytest.mark.parametrize("option", ["?busy_timeout=5", "?synchronous=normal"])
async def test_a_url_with_options_is_left_to_the_store(url: str, option: str) -> None:
    assert read_runs(url + option) is None


def test_a_missing_file_is_left_to_the_store_and_not_made(tmp_path: Path) -> None:
    missing = tmp_path / "none" / "ledger.db"
    assert read_runs(f"sqlite:///{missing}") is None
    assert not missing.parent.exists()


@pytest.mark.parametrize(
    "other", ["memory://", "sqlite:///:memory:", "postgresql://u:p@127.0.0.1:1/db"]
)
def test_other_databases_are_left_to_the_store(other: str) -> None:
    assert read_runs(other) is None


async def test_a_file_that_is_no_database_is_left_to_the_store(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    assert read_runs(f"sqlite:///{junk}") is None
