"""A database made by the release before stageline's own checkpoint store (LangGraph's tables),
upgraded in place with ``stageline db upgrade``: its runs read, resume and retry as before.

The databases in ``tests/fixtures/release_db`` were made by that release's CLI (see its README):
``done1`` succeeded, ``wait1`` waits at the editor's gate, ``fail1`` failed.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest

from stageline.config import load_settings
from stageline.runner import Runner

Cli = Callable[..., subprocess.CompletedProcess[str]]

RELEASE = Path(__file__).parent.parent / "fixtures" / "release_db"
RUNS = ("done1", "wait1", "fail1")
OLD_TEMPLATE = "/tmp/fx/flaky.py"
"""Where ``fail1``'s template was when the fixture was made; the tests move it to tmp_path."""


def _code(done: subprocess.CompletedProcess[str], code: int) -> subprocess.CompletedProcess[str]:
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    return done


def _sqlite_release(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    path = tmp_path / "home" / "stageline.db"
    shutil.copy(RELEASE / "sqlite.db", path)
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE stageline_runs SET template = ? WHERE run_id = 'fail1'",
            (str(tmp_path / "flaky.py"),),
        )
    db.close()


def _postgres_release(tmp_path: Path, url: str) -> None:
    dump = (RELEASE / "postgres.sql").read_text()
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(dump.encode())
    with psycopg.connect(url, autocommit=True) as db:
        db.execute(
            "UPDATE stageline_runs SET template = %s WHERE run_id = 'fail1'",
            (str(tmp_path / "flaky.py"),),
        )


def _expected(tmp_path: Path, prefix: str) -> tuple[dict[str, Any], Any]:
    shown = {r: json.loads((RELEASE / f"{prefix}show_{r}.json").read_text()) for r in RUNS}
    shown["fail1"]["run"]["template"] = str(tmp_path / "flaky.py")
    return shown, json.loads((RELEASE / f"{prefix}stats.json").read_text())


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_database_of_the_previous_release_is_upgraded_and_its_runs_go_on(
    cli: Cli,
    tmp_path: Path,
    postgres_empty_url: str,
    backend: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shutil.copy(RELEASE / "flaky.py", tmp_path / "flaky.py")
    db = None
    if backend == "sqlite":
        _sqlite_release(tmp_path)
        shown, stats = _expected(tmp_path, "")
    else:
        db = postgres_empty_url
        _postgres_release(tmp_path, db)
        shown, stats = _expected(tmp_path, "pg_")

    refused = _code(cli("runs", db=db), 6).stderr
    assert "stageline db upgrade" in refused and len(refused.strip().splitlines()) <= 2

    upgraded = _code(cli("db", "upgrade", db=db), 0).stdout
    assert "converted 19 checkpoint(s)" in upgraded
    for run_id in RUNS:
        now = json.loads(_code(cli("show", run_id, "--json", db=db), 0).stdout)
        assert now["lineage"].pop("cron_id") is None  # added since (schedules): no schedule
        # What the release showed, unchanged; keys added since (interrupt and CI waits) say
        # nothing.
        assert {k: v for k, v in now.items() if k in shown[run_id]} == shown[run_id]
        added = {k: v for k, v in now.items() if k not in shown[run_id]}
        assert added == {"interrupts": [], "ci": []}
    assert json.loads(_code(cli("stats", "--json", db=db), 0).stdout) == stats

    # The runs go on (in this process: the commands that decide and retry are not under test).
    monkeypatch.chdir(tmp_path)  # where flaky.py looks for ok.flag
    (tmp_path / "ok.flag").write_text("")
    assert asyncio.run(_go_on(tmp_path, db)) == dict.fromkeys(RUNS, "succeeded")
    assert "converted" not in _code(cli("db", "upgrade", db=db), 0).stdout


async def _go_on(tmp_path: Path, db: str | None) -> dict[str, str]:
    """Approve ``wait1`` and retry ``fail1``, as ``stageline approve`` and ``retry`` would;
    the runs' statuses after."""
    env = {"STAGELINE_HOME": str(tmp_path / "home"), "STAGELINE_MODEL": "offline"}
    if db:
        env["STAGELINE_DATABASE_URL"] = db
    async with Runner.open(load_settings(cwd=tmp_path, env=env)) as runner:
        await runner.approve("wait1", note="after the upgrade")
        await runner.retry("fail1")
        return {r.run_id: str(r.status) for r in await runner.ledger.list_runs()}
