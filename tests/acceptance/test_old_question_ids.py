"""A question set asked before question ids named their node (``tests/fixtures/old_question_db``:
its ledger row and its checkpoint's interrupt carry the old id) takes its answer from this
release, through the CLI, on SQLite and on Postgres; the answer lands under the old id."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

Cli = Callable[..., subprocess.CompletedProcess[str]]

FIXTURES = Path(__file__).parent.parent / "fixtures"
OLD = FIXTURES / "old_question_db"
OLD_ID = "930325b814c65645821cc72182d0fa09"
"""``ask1``'s set, as the old scheme named it: ``uuid5(namespace, "ask1:0")``."""


def _point_at(db: sqlite3.Connection | psycopg.Connection, mark: str, template: Path) -> None:
    db.execute(
        f"UPDATE stageline_runs SET template = {mark} WHERE run_id = 'ask1'", (str(template),)
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_set_asked_under_the_old_id_takes_its_answer_after_the_upgrade(
    cli: Cli, tmp_path: Path, postgres_empty_url: str, backend: str
) -> None:
    template = tmp_path / "json_question.py"
    shutil.copy(FIXTURES / "json_question.py", template)
    db = None
    if backend == "sqlite":
        (tmp_path / "home").mkdir()
        path = tmp_path / "home" / "stageline.db"
        shutil.copy(OLD / "sqlite.db", path)
        with sqlite3.connect(path) as lite:
            _point_at(lite, "?", template)
        lite.close()
    else:
        db = postgres_empty_url
        with psycopg.connect(db, autocommit=True) as pg:
            pg.execute((OLD / "postgres.sql").read_text().encode())
        with psycopg.connect(db, autocommit=True) as pg:  # the dump emptied the search path
            _point_at(pg, "%s", template)

    before = json.loads(cli("show", "ask1", "--json", db=db).stdout)
    assert [(q["wait_id"], q["status"]) for q in before["questions"]] == [(OLD_ID, "pending")]

    done = cli("answer", "ask1", "-a", 'limits={"rps": 5}', "-a", "tier=pro", db=db)
    assert done.returncode == 0, (done.stdout, done.stderr)

    after = json.loads(cli("show", "ask1", "--json", db=db).stdout)
    assert after["run"]["status"] == "succeeded"
    assert [(q["wait_id"], q["status"]) for q in after["questions"]] == [(OLD_ID, "applied")]
    assert after["state"]["answers"] == {"limits": {"rps": 5}, "tier": "pro"}
    assert [e["question_id"] for e in after["state"]["qa_history"]] == [OLD_ID]
