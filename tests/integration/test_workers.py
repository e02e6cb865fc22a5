"""``stageline worker`` processes on Postgres: detach, SIGTERM drain, SIGKILL recovery; and the
local worker of a SQLite project. Each node of the template writes ``start``/``end`` lines to a
trail file outside the workers, so the tests count what really ran."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from fake_http import wait_for

FIXTURE = Path(__file__).parent.parent / "fixtures" / "worker_nodes.py"
NODES = [f"n{i}" for i in range(1, 11)]
CLI = [sys.executable, "-m", "stageline.cli"]

Trail = list[tuple[str, str, str, int]]
"""(start|end, run, node, pid) in the order written."""


def worker_env(tmp_path: Path, url: str | None, sleep: float = 0.0) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env["STAGELINE_HOME"] = str(tmp_path / ".stageline")
    if url:
        env["STAGELINE_DATABASE_URL"] = url
    env["STAGELINE_TEST_TRAIL"] = str(tmp_path / "trail.txt")
    env["STAGELINE_TEST_NODE_SLEEP"] = str(sleep)
    return env


def read_trail(tmp_path: Path) -> Trail:
    path = tmp_path / "trail.txt"
    if not path.exists():
        return []
    out: Trail = []
    for line in path.read_text().splitlines():
        what, run, node, pid = line.split()
        out.append((what, run, node, int(pid)))
    return out


def cli(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True
    )


def status_of(tmp_path: Path, env: dict[str, str], run_id: str) -> dict[str, object]:
    return json.loads(cli(tmp_path, env, "show", run_id, "--json").stdout)  # type: ignore[no-any-return]


def run_status(env: dict[str, str], run_id: str) -> str | None:
    """The run's status, read straight from the database (polling through the CLI is slow)."""
    url = env.get("STAGELINE_DATABASE_URL")
    query = "SELECT status FROM stageline_runs WHERE run_id = "
    if url:
        with psycopg.connect(url, autocommit=True) as conn:
            row = conn.execute(query + "%s", (run_id,)).fetchone()
    else:
        with contextlib.closing(
            sqlite3.connect(Path(env["STAGELINE_HOME"]) / "stageline.db", timeout=10)
        ) as db:
            row = db.execute(query + "?", (run_id,)).fetchone()
    return None if row is None else str(row[0])


def wait_until(what: Callable[[], bool], timeout: float, why: str) -> None:
    wait_for(what, timeout=timeout, failure=lambda: why)


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[[dict[str, str]], subprocess.Popen[str]]]:
    """Starts ``stageline worker`` processes; kills whatever is left at the end."""
    started: list[subprocess.Popen[str]] = []

    def start(env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        log = (tmp_path / f"worker{len(started)}.log").open("w")
        proc = subprocess.Popen(
            [*CLI, "worker", *args],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        log.close()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def test_detach_on_postgres_queues_a_job_that_a_worker_finishes(
    tmp_path: Path,
    postgres_url: str,
    workers: Callable[..., subprocess.Popen[str]],
) -> None:
    env = worker_env(tmp_path, postgres_url)
    out = cli(tmp_path, env, "run", str(FIXTURE), "-i", "seed:=5", "--detach", "--run-id", "d1")
    assert "a `stageline worker` advances it" in out.stdout
    assert status_of(tmp_path, env, "d1")["run"]["status"] == "queued"  # type: ignore[index]
    worker = workers(env)
    wait_until(lambda: run_status(env, "d1") == "succeeded", 30, "the worker to finish the run")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=30) == 0
    assert Counter(node for what, _, node, _ in read_trail(tmp_path) if what == "end") == {
        n: 1 for n in NODES
    }


def test_sigterm_drains_after_the_current_step_and_another_worker_finishes(
    tmp_path: Path,
    postgres_url: str,
    workers: Callable[..., subprocess.Popen[str]],
) -> None:
    env = worker_env(tmp_path, postgres_url, sleep=0.4)
    cli(tmp_path, env, "run", str(FIXTURE), "--detach", "--run-id", "s1")
    first = workers(env)
    wait_until(
        lambda: any(t[0] == "end" and t[2] == "n2" for t in read_trail(tmp_path)), 30, "n2 to end"
    )
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=30) == 0
    shown = status_of(tmp_path, env, "s1")
    assert shown["run"]["status"] == "queued"  # type: ignore[index]
    done = {r["node"] for r in shown["records"] if r["status"] == "succeeded"}  # type: ignore[attr-defined]
    ended = [t[2] for t in read_trail(tmp_path) if t[0] == "end"]
    assert done == set(ended) and len(done) >= 2 and "n10" not in done
    assert not [t for t in read_trail(tmp_path) if t[0] == "start" and t[2] not in done]
    events = json.loads(cli(tmp_path, env, "logs", "s1", "--json").stdout)
    assert events[-1]["kind"] == "run.drained"

    second = workers(env)
    wait_until(
        lambda: run_status(env, "s1") == "succeeded", 30, "the second worker to finish the run"
    )
    trail = read_trail(tmp_path)
    assert Counter(t[2] for t in trail if t[0] == "start") == {n: 1 for n in NODES}  # none twice
    assert {t[3] for t in trail if t[2] in done} == {first.pid}
    assert {t[3] for t in trail if t[2] not in done} == {second.pid}
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0


def test_a_killed_worker_leaves_a_stalled_job_that_another_worker_resumes(
    tmp_path: Path,
    postgres_url: str,
    workers: Callable[..., subprocess.Popen[str]],
) -> None:
    env = worker_env(tmp_path, postgres_url, sleep=0.3)
    cli(tmp_path, env, "run", str(FIXTURE), "--detach", "--run-id", "k1")
    first = workers(env)
    wait_until(
        lambda: any(t[0] == "start" and t[2] == "n4" for t in read_trail(tmp_path)),
        30,
        "n4 to start",
    )
    first.kill()
    first.wait(timeout=30)
    killed_at = len(read_trail(tmp_path))
    second = workers(env)
    wait_until(
        lambda: run_status(env, "k1") == "succeeded",
        40,
        "another worker to pick up the stalled job",
    )
    trail = read_trail(tmp_path)
    starts = Counter(t[2] for t in trail if t[0] == "start")
    repeated = {n for n, c in starts.items() if c > 1}
    # At most the node in flight at the kill runs again; every node before it was checkpointed.
    assert repeated <= {"n4", "n5"} and len(repeated) <= 1 and all(c <= 2 for c in starts.values())
    assert {t[3] for t in trail[killed_at:]} == {second.pid}
    shown = status_of(tmp_path, env, "k1")
    assert {r["node"] for r in shown["records"] if r["status"] == "succeeded"} == set(NODES)  # type: ignore[attr-defined]
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=30) == 0


def test_detach_on_sqlite_goes_to_one_local_worker(tmp_path: Path) -> None:
    env = worker_env(tmp_path, None, sleep=0.05)
    first = cli(tmp_path, env, "run", str(FIXTURE), "--detach", "--run-id", "l1")
    assert "started the local worker" in first.stdout
    cli(tmp_path, env, "run", str(FIXTURE), "--detach", "--run-id", "l2")
    for run_id in ("l1", "l2"):
        wait_until(
            lambda r=run_id: run_status(env, r) == "succeeded",
            30,  # type: ignore[misc]
            f"the local worker to finish {run_id}",
        )
    trail = read_trail(tmp_path)
    assert len({t[3] for t in trail}) == 1  # one worker process advanced both
    assert Counter(t[1] for t in trail if t[0] == "start") == {"l1": 10, "l2": 10}
    pid = int((tmp_path / ".stageline" / "worker.lock").read_text())
    os.kill(pid, signal.SIGTERM)
    wait_until(lambda: not _alive(pid), 30, "the local worker to stop")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (its parent, the CLI, is gone, so init reaps it soon) counts as gone.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")
