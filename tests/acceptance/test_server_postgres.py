"""`stageline serve` over Postgres: runs started without waiting go through the job queue,
which the server works in-process; gates, search and tokens as on SQLite."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from server_fixtures import Server


@pytest.mark.timeout(300)
def test_the_api_over_postgres(serve_project: Callable[..., Server], postgres_url: str) -> None:
    server = serve_project(database_url=postgres_url, templates=("ten_nodes.py",))
    with server.client("decide") as client:
        queued = client.post("/v1/runs", json={"template": "ten_nodes", "inputs": {"seed": 4}})
        assert queued.status_code == 201 and queued.json()["run"]["status"] == "queued"
        run_id = queued.json()["run"]["run_id"]
        # Polls until the queue advanced it (pytest-timeout bounds a run never advanced).
        while client.get(f"/v1/runs/{run_id}").json()["run"]["status"] != "succeeded":
            time.sleep(0.2)
        gated = client.post(
            "/v1/runs",
            json={"template": "blog_post", "inputs": {"topic": "pg"}, "wait": True},
        ).json()
        assert gated["run"]["status"] == "waiting"
        waiting = client.get("/v1/runs", params={"status": "waiting", "q": "pg"}).json()["runs"]
        assert [r["run_id"] for r in waiting] == [gated["run"]["run_id"]]
        approved = client.post(
            f"/v1/runs/{gated['run']['run_id']}/decide",
            json={"decision": "approve", "attempt": 1},
        )
        assert approved.status_code == 200 and approved.json()["run"]["status"] == "succeeded"
        shown = client.get(f"/v1/runs/{gated['run']['run_id']}").json()
    assert shown["decisions"][0]["actor"] == "decider"
