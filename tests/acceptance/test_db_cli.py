"""``stageline db`` and the choice of database, as a user meets them: a real subprocess.

The move from SQLite to Postgres is the story: runs made on the SQLite file (finished, waiting
at a gate, failed, queued) are copied with ``db copy`` and then carried on with Postgres.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stageline.config import load_settings
from stageline.runner import Runner

Cli = Callable[..., subprocess.CompletedProcess[str]]
"""The ``cli`` fixture (tests/acceptance/conftest.py); ``db=URL`` picks the database."""


def _code(done: subprocess.CompletedProcess[str], code: int) -> subprocess.CompletedProcess[str]:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done


def _runs(cli: Cli, db: str | None = None) -> dict[str, str]:
    listed = json.loads(_code(cli("runs", "--json", db=db), 0).stdout)
    return {r["run_id"]: r["status"] for r in listed}


def _summaries(tmp_path: Path, run_ids: list[str], db: str | None = None) -> dict[str, Any]:
    """What ``stageline show --json`` prints for each run (read in this process: faster)."""
    env = {"STAGELINE_HOME": str(tmp_path / "home"), "STAGELINE_MODEL": "offline"}
    if db:
        env["STAGELINE_DATABASE_URL"] = db

    async def read() -> dict[str, Any]:
        async with Runner.open(load_settings(cwd=tmp_path, env=env)) as runner:
            return {r: (await runner.status(r)).to_dict() for r in run_ids}

    return asyncio.run(read())


# -- choosing the database ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "command", [("runs",), ("db", "upgrade"), ("run", "blog_post", "-i", "topic=x")]
)
def test_postgres_stopped_is_exit_6_naming_the_host_without_the_password(
    cli: Cli, command: tuple[str, ...]
) -> None:
    done = _code(cli(*command, db="postgresql://stageline:s3cret@127.0.0.1:1/ledger"), 6)
    assert "127.0.0.1:1/ledger" in done.stderr
    assert "s3cret" not in done.stderr + done.stdout
    assert done.stderr.startswith("error: cannot connect to Postgres")
    assert len(done.stderr.strip().splitlines()) <= 2


def test_ephemeral_runs_in_memory_on_purpose_and_says_so(cli: Cli, tmp_path: Path) -> None:
    done = _code(cli("run", "blog_post", "-i", "topic=x", "--run-id", "mem1", "--ephemeral"), 3)
    assert "warning: --ephemeral" in done.stderr
    assert not (tmp_path / "home" / "stageline.db").exists()
    assert "mem1" not in _runs(cli)
    # It waits at its gate, but nothing could decide it: no command is offered that cannot work.
    assert "waiting at gate editor_approval" in done.stdout
    for command in ("stageline approve", "stageline reject", "stageline show", "stageline changes"):
        assert command not in done.stdout
    assert "kept in memory only" in done.stdout and "without --ephemeral" in done.stdout
    by_env = _code(cli("run", "blog_post", "-i", "topic=x", STAGELINE_EPHEMERAL="1"), 3)
    assert "warning: --ephemeral" in by_env.stderr
    refused = _code(cli("run", "blog_post", "-i", "topic=x", "--ephemeral", "--detach"), 2)
    assert "--detach" in refused.stderr


def test_db_upgrade_applies_the_migrations_once(cli: Cli, postgres_empty_url: str) -> None:
    for db in (None, postgres_empty_url):
        first = _code(cli("db", "upgrade", db=db), 0).stdout
        assert "schema version" in first and "applied migration(s) 1" in first
        again = _code(cli("db", "upgrade", db=db), 0).stdout
        assert "already up to date" in again
    with psycopg.connect(postgres_empty_url, autocommit=True) as conn:
        queue = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()
    assert queue is not None and queue[0] is not None  # the job queue's tables, for workers


# -- moving from SQLite to Postgres -------------------------------------------------------------


@contextlib.asynccontextmanager
async def _runner(tmp_path: Path, db: str | None = None) -> AsyncIterator[Runner]:
    """A runner as the CLI in ``tmp_path`` would open it (default: the SQLite file)."""
    env = {"STAGELINE_HOME": str(tmp_path / "home"), "STAGELINE_MODEL": "offline"}
    if db:
        env["STAGELINE_DATABASE_URL"] = db
    async with Runner.open(load_settings(cwd=tmp_path, env=env)) as runner:
        yield runner


async def _statuses(runner: Runner) -> dict[str, str]:
    return {r.run_id: str(r.status) for r in await runner.ledger.list_runs()}


def test_db_copy_moves_finished_waiting_failed_and_queued_runs_to_postgres(
    cli: Cli,
    tmp_path: Path,
    postgres_url: str,
    flaky_template: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``db copy`` runs as a user runs it; the runs around it are made and carried on in this
    process (one CLI process each would cost a second apiece, and they are not under test)."""
    pg = postgres_url
    monkeypatch.chdir(tmp_path)  # where flaky.py looks for ok.flag
    (tmp_path / "flaky.py").write_text(flaky_template)

    async def on_sqlite() -> tuple[dict[str, str], dict[str, Any]]:
        async with _runner(tmp_path) as runner:
            await runner.start("blog_post", {"topic": "done"}, run_id="done1")
            await runner.approve("done1", note="fine")
            await runner.start("blog_post", {"topic": "waits"}, run_id="wait1")
            await runner.start("flaky.py", {}, run_id="fail1")
            await runner.create("blog_post", {"topic": "later"}, run_id="queued1")  # as
            # ``run --detach`` leaves it before its worker starts
            statuses = await _statuses(runner)
            return statuses, {r: (await runner.status(r)).to_dict() for r in sorted(statuses)}

    made, shown = asyncio.run(on_sqlite())
    assert made == {
        "done1": "succeeded",
        "wait1": "waiting",
        "fail1": "failed",
        "queued1": "queued",
    }

    copied = _code(cli("db", "copy", "--to", pg), 0).stdout
    assert "copied 4 run(s)" in copied
    assert _runs(cli, db=pg) == made
    assert _summaries(tmp_path, sorted(made), db=pg) == shown  # runs, records, state

    async def carry_on() -> tuple[dict[str, str], list[Any]]:
        async with _runner(tmp_path, pg) as runner:
            await runner.approve("wait1", note="go")
            (tmp_path / "ok.flag").write_text("")
            await runner.retry("fail1")
            waits = await runner.resume("queued1")  # on to the editor's gate
            assert str(waits.status) == "waiting"
            await runner.approve("queued1")
            return await _statuses(runner), await runner.ledger.events("wait1")

    carried, events = asyncio.run(carry_on())
    assert set(carried.values()) == {"succeeded"}
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[-1].kind == "run.succeeded"

    async def left_on_sqlite() -> dict[str, str]:
        async with _runner(tmp_path) as runner:
            return await _statuses(runner)

    assert asyncio.run(left_on_sqlite()) == made  # the SQLite file is left as it was

    again = _code(cli("db", "copy", "--to", pg), 0).stdout  # safe to repeat: nothing regresses
    assert "copied 4 run(s)" in again
    assert set(_runs(cli, db=pg).values()) == {"succeeded"}


def test_db_copy_into_the_same_database_or_memory_is_refused(cli: Cli, tmp_path: Path) -> None:
    here = f"sqlite:///{tmp_path / 'home' / 'stageline.db'}"
    assert "same database" in _code(cli("db", "copy", "--to", here), 2).stderr
    assert "memory://" in _code(cli("db", "copy", "--to", "memory://"), 2).stderr
