"""Several server processes behind one database: every LangGraph SDK call works whichever
process gets it (``stageline serve --workers N``, README "Scale-out").

Two ``stageline serve`` processes on two ports over one project and database make "another
process" certain: a run started through one is joined, waited on, resumed, streamed and
cancelled through the other. ``--workers 2`` (``STAGELINE_SERVER_WORKERS``) is then driven as a
client sees it, one port, each client's connection landing on either process.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_sync_client
from langgraph_sdk.client import SyncLangGraphClient

from server_fixtures import Server, make_project

PROJECT = Path(__file__).parents[1] / "fixtures" / "compat_project"
ACCEPT = [{"type": "accept", "args": None}]


def _database(backend: str, request: pytest.FixtureRequest) -> str | None:
    return str(request.getfixturevalue("postgres_url")) if backend == "postgres" else None


def _project(root: Path, database_url: str | None, env: dict[str, str] | None = None) -> Server:
    server = make_project(root, database_url=database_url, env=env)
    shutil.copytree(PROJECT, server.project, dirs_exist_ok=True)
    return server


def _eventually(look: Callable[[], str], still: str = "running") -> str:
    """What ``look`` says once it no longer says ``still`` (a hang guard, not a timing)."""
    for _ in range(600):
        said = look()
        if said != still:
            return said
        time.sleep(0.1)
    return said


def _client(server: Server) -> SyncLangGraphClient:
    return get_sync_client(url=server.url, api_key=server.tokens["admin"], timeout=60)


@pytest.fixture(params=["sqlite", "postgres"])
def two_servers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Server, Server]]:
    """Two server processes over one project and database."""
    first = _project(tmp_path / "project", _database(request.param, request))
    second = Server(project=first.project, env=first.env, tokens=first.tokens)
    try:
        first.start()
        second.start()
        yield first, second
    finally:
        first.kill()
        second.kill()


def test_a_run_started_through_one_process_is_followed_through_another(
    two_servers: tuple[Server, Server],
) -> None:
    one, other = two_servers
    with _client(one) as a, _client(other) as b:
        tid = a.threads.create()["thread_id"]
        started = a.runs.create(tid, "review", input={"email": "hi"})
        joined = b.runs.join(tid, started["run_id"])
        assert joined["reply"] == "Thanks for: hi" and joined["__interrupt__"]
        assert b.runs.get(tid, started["run_id"])["status"] == "success"
        assert b.threads.get(tid)["status"] == "interrupted"

        resumed = b.runs.wait(tid, "review", command={"resume": ACCEPT})
        assert resumed == {"email": "hi", "reply": "Thanks for: hi"}
        assert a.threads.get(tid)["status"] == "idle"

        # A resume accepted by one process and joined through the other at once: the join
        # waits for the decision to take effect, not the state it found.
        tid = a.threads.create()["thread_id"]
        a.runs.wait(tid, "review", input={"email": "again"})
        resume = a.runs.create(tid, "review", command={"resume": ACCEPT})
        assert "__interrupt__" not in b.runs.join(tid, resume["run_id"])
        assert b.runs.get(tid, resume["run_id"])["status"] == "success"


def test_streams_cancels_and_busy_threads_across_processes(
    two_servers: tuple[Server, Server],
) -> None:
    one, other = two_servers
    with _client(one) as a, _client(other) as b:
        tid = a.threads.create()["thread_id"]
        slow = a.runs.create(tid, "slow", input={"waited": False})
        with pytest.raises(httpx.HTTPStatusError) as refused:
            b.runs.create(tid, "slow", input={"waited": False})
        assert refused.value.response.status_code == 409
        parts = list(b.runs.join_stream(tid, slow["run_id"]))
        values = [p.data for p in parts if p.event == "values"]
        assert values and values[-1] == {"waited": True}
        assert b.runs.get(tid, slow["run_id"])["status"] == "success"

        tid = a.threads.create()["thread_id"]
        slow = a.runs.create(tid, "slow", input={"waited": False})
        b.runs.cancel(tid, slow["run_id"], wait=True)
        assert b.runs.get(tid, slow["run_id"])["status"] == "interrupted"
        assert b.threads.get(tid)["status"] == "idle"
        # The process that advanced it records the same end (as soon as its task has ended).
        assert _eventually(lambda: a.runs.get(tid, slow["run_id"])["status"]) == "interrupted"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_serve_workers_answers_the_sdk_on_one_port(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    server = _project(
        tmp_path / "project",
        _database(backend, request),
        env={"STAGELINE_SERVER_WORKERS": "2"},
    )
    try:
        server.start()
        outcomes: list[dict[str, Any]] = []
        for i in range(6):  # each client its own connection: either process may take it
            with _client(server) as first, _client(server) as second:
                tid = first.threads.create()["thread_id"]
                run = first.runs.create(tid, "review", input={"email": f"n{i}"})
                assert second.runs.join(tid, run["run_id"])["__interrupt__"]
                outcomes.append(second.runs.wait(tid, "review", command={"resume": ACCEPT}))
        assert outcomes == [{"email": f"n{i}", "reply": f"Thanks for: n{i}"} for i in range(6)]
    finally:
        assert server.stop() == 0, server.log()
