"""Runs started through the server survive it: killed (-9) or stopped while it advances a run,
the next server picks the run up from its checkpoint; no node that completed runs again.

On SQLite the new server sees the dead holder's lease and resumes the run; on Postgres the run's
job went through the queue (the server works it in-process) and is picked up the same way."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from server_fixtures import Server


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _trail(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _run(server: Server, run_id: str) -> dict[str, Any]:
    with server.client("read") as client:
        answer = client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str | None:
    return None if request.param == "sqlite" else str(request.getfixturevalue("postgres_url"))


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM], ids=["kill-9", "sigterm"])
def test_a_run_survives_the_server_dying_while_it_advances_it(
    serve_project: Callable[..., Server],
    tmp_path: Path,
    database_url: str | None,
    stop: int,
) -> None:
    trail, release = tmp_path / "trail.txt", tmp_path / "release"
    server = serve_project(
        templates=("blocking.py",),
        database_url=database_url,
        env={"STAGELINE_TEST_TRAIL": str(trail), "STAGELINE_TEST_RELEASE": str(release)},
    )
    with server.client("decide") as client:
        answer = client.post("/v1/runs", json={"template": "blocking", "inputs": {"topic": "t"}})
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["run"]["run_id"]
    _wait_for(
        lambda: any(line.startswith("start hold") for line in _trail(trail)),
        "the server to reach the blocking node",
    )
    first_pid = server.proc.pid if server.proc else None

    server.kill(stop)
    release.touch()
    server.start()

    _wait_for(
        lambda: _run(server, run_id)["run"]["status"] == "succeeded",
        "the restarted server to finish the run",
    )
    lines = _trail(trail)
    starts = Counter(line.split()[1] for line in lines if line.startswith("start"))
    assert starts["first"] == 1, lines  # completed before the kill: never again
    assert starts["last"] == 1, lines
    assert starts["hold"] in (1, 2), lines  # the node running at the kill re-runs once
    assert any(
        line.startswith("end last") and not line.endswith(f" {first_pid}") for line in lines
    ), lines
    records = _run(server, run_id)["records"]
    done = Counter(r["node"] for r in records if r["status"] == "succeeded")
    assert done == {"first": 1, "hold": 1, "last": 1}, records
    with server.client("read") as client:
        events = client.get(f"/v1/runs/{run_id}/events").json()
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert sum(e["kind"] == "run.succeeded" for e in events) == 1
