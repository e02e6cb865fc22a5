"""Schedules on Postgres with several ``stageline worker`` processes: every worker looks for due
schedules each second, and each due time fires exactly once (one run per due time, naming its
schedule). ``stageline schedule add / list / delete`` drive it, refusals included."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
from _procs import start_worker, stop_workers

from conftest import run_stageline

WORKERS = 3


def _rows(url: str, sql: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(sql).fetchall()


@pytest.mark.timeout(300)  # a hang guard: nothing here is timed
def test_a_due_schedule_fires_exactly_once_across_workers(
    tmp_path: Path, postgres_url: str, worker_env: Callable[..., dict[str, str]]
) -> None:
    env = worker_env(postgres_url)
    bad = run_stageline(tmp_path, env, "schedule", "add", "blog_post", "often", "-i", "topic=x")
    assert bad.returncode == 2 and "not a cron expression" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) <= 2

    added = run_stageline(
        tmp_path, env, "schedule", "add", "blog_post", "* * * * * *", "-i", "topic=t", "--json"
    )
    assert added.returncode == 0, added.stderr
    cron_id = json.loads(added.stdout)["cron_id"]
    # Due every second from now on: the workers, starting together, all find its first due
    # times missed (one firing for them) and then the next ones, each due time once.
    procs = [start_worker(tmp_path, env, tmp_path / f"worker{i}.log") for i in range(WORKERS)]
    try:
        # Wait (bounded) for a few firings, then stop the workers while they still look.
        for _ in range(1200):
            if len(_rows(postgres_url, "SELECT run_id FROM stageline_cron_fires")) >= 3:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the schedule did not fire three times")
    finally:
        stop_workers(procs)

    fires = _rows(postgres_url, "SELECT due_at, run_id FROM stageline_cron_fires")
    due_times = [due for due, _ in fires]
    assert len(set(due_times)) == len(due_times)  # each due time once
    fired_runs = {run for _, run in fires}
    assert len(fired_runs) == len(fires)
    named = _rows(
        postgres_url,
        "SELECT run_id FROM stageline_thread_meta WHERE metadata LIKE '%\"cron_id\"%'",
    )
    assert {r for (r,) in named} == fired_runs  # one run per firing, and no other
    assert len(_rows(postgres_url, "SELECT run_id FROM stageline_runs")) == len(fires)
    for i in range(WORKERS):
        log = (tmp_path / f"worker{i}.log").read_text()
        assert "Traceback" not in log and "could not fire" not in log, log

    shown = run_stageline(tmp_path, env, "show", sorted(fired_runs)[0], "--json")
    assert json.loads(shown.stdout)["lineage"]["cron_id"] == cron_id
    over = run_stageline(
        tmp_path, env, "schedule", "add", "blog_post", "0 9 * * *", "-i", "topic=t",
        "--until", "2001-01-01T00:00:00",
    )  # fmt: skip
    assert over.returncode == 0 and "never (over)" in over.stdout, over.stderr
    listed = json.loads(run_stageline(tmp_path, env, "schedule", "list", "--json").stdout)
    assert listed[0]["cron_id"] == cron_id and listed[1]["next_run_at"] is None
    table = run_stageline(tmp_path, env, "schedule", "list").stdout
    assert cron_id in table and "never (over)" in table
    assert run_stageline(tmp_path, env, "schedule", "delete", cron_id).returncode == 0
    gone = run_stageline(tmp_path, env, "schedule", "delete", cron_id)
    assert gone.returncode == 2 and "no schedule" in gone.stderr
