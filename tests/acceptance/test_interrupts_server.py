"""A graph's own ``interrupt()`` over a real ``stageline serve``: listed by ``/v1/pending``,
answered with ``POST /v1/runs/{id}/respond`` (token scope decide, the token's name as actor,
409 once answered, 422 on a bad body) and by ``langgraph_sdk``'s ``command={"resume": ...}``
through the same recorded path."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from langgraph_sdk import get_client

from server_fixtures import Server


@pytest.fixture
def server(serve_project: Callable[..., Server]) -> Server:
    return serve_project(templates=("interrupts.py",))


def _waiting(client: httpx.Client, run_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        [*found] = client.get(f"/v1/runs/{run_id}/pending").json()
        if found and (client.get(f"/v1/runs/{run_id}").json()["run"]["status"] == "waiting"):
            return dict(found[0])
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} never waited")


def test_the_api_lists_and_answers_an_interrupt_once(server: Server) -> None:
    with server.client("decide") as decider, server.client("read") as reader:
        made = decider.post(
            "/v1/runs", json={"template": "interrupts", "inputs": {"topic": "fence"}, "wait": True}
        )
        assert made.status_code == 201, made.text
        run_id = made.json()["run"]["run_id"]
        [listed] = [w for w in reader.get("/v1/pending").json() if w["run_id"] == run_id]
        assert (listed["kind"], listed["node"], listed["value"]) == (
            "interrupt",
            "ask",
            {"question": "which colour?", "topic": "fence"},
        )
        url = f"/v1/runs/{run_id}/respond"
        assert reader.post(url, json={"value": "red"}).status_code == 403
        assert decider.post(url, json={}).status_code == 422
        assert decider.post(url, json={"value": None}).status_code == 422
        assert decider.post(url, json={"value": 1, "extra": 2}).status_code == 422

        answered = decider.post(url, json={"value": {"hex": "#00f"}, "wait_id": listed["wait_id"]})
        assert answered.status_code == 200, answered.text
        again = decider.post(url, json={"value": "red", "wait_id": listed["wait_id"]})
        assert again.status_code == 409 and "already answered by decider" in again.text

        inbox = _waiting(decider, run_id)
        assert inbox["value"]["description"] == "Paint it?" and inbox["payload"]["human"]
        edit = decider.post(url, json={"value": {"type": "edit", "args": {}}})
        assert edit.status_code == 422 and "does not allow 'edit'" in edit.text
        done = decider.post(url, json={"value": [{"type": "accept", "args": None}]})
        assert done.status_code == 200, done.text
        detail = decider.get(f"/v1/runs/{run_id}").json()
        assert detail["run"]["status"] == "succeeded"
        assert detail["state"]["colour"] == {"hex": "#00f"}
        assert detail["state"]["verdict"] == [{"type": "accept", "args": None}]
        assert [(w["answer"], w["actor"], w["status"]) for w in detail["interrupts"]] == [
            ({"hex": "#00f"}, "decider", "applied"),
            ([{"type": "accept", "args": None}], "decider", "applied"),
        ]


async def test_a_langgraph_resume_is_recorded_as_the_answer(server: Server) -> None:
    async with get_client(url=server.url, api_key=server.tokens["decide"]) as client:
        thread = await client.threads.create()
        tid = thread["thread_id"]
        stopped = await client.runs.wait(tid, "interrupts", input={"topic": "gate"})
        [asked] = stopped["__interrupt__"]
        assert asked["value"]["question"] == "which colour?"
        state = await client.threads.get_state(tid)
        assert [i["id"] for i in state["interrupts"]] == [asked["id"]]

        resumed = await client.runs.create(tid, "interrupts", command={"resume": "green"})
        await client.runs.join(tid, resumed["run_id"])
        state = await client.threads.get_state(tid)
        [inbox] = state["interrupts"]
        assert inbox["value"]["action_request"]["args"] == {"colour": "green"}
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await client.runs.create(
                tid, "interrupts", command={"resume": {"type": "edit", "args": {}}}
            )
        assert refused.value.response.status_code == 422
        keyed = {inbox["id"]: [{"type": "response", "args": "not today"}]}
        resumed = await client.runs.create(tid, "interrupts", command={"resume": keyed})
        await client.runs.join(tid, resumed["run_id"])
        assert (await client.threads.get(tid))["status"] == "idle"
    shown = json.loads(server.cli("show", tid, "--json").stdout)
    assert shown["state"]["verdict"] == [{"type": "response", "args": "not today"}]
    interrupts = shown["interrupts"]
    assert [(w["answer"], w["actor"]) for w in interrupts] == [
        ("green", "decider"),
        ([{"type": "response", "args": "not today"}], "decider"),
    ]
