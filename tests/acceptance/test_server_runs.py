"""The /v1 API over a real `stageline serve`: start, list, read, decide, answer, events, bad
input. Decisions carry the token's name as actor; refused requests leave nothing behind."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from server_fixtures import Server, http_get


def _until(
    client: httpx.Client, run_id: str, *statuses: str, timeout: float = 120
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = client.get(f"/v1/runs/{run_id}").json()
        if run["run"]["status"] in statuses:
            return run
        time.sleep(0.2)
    raise AssertionError(f"run {run_id} is still {run['run']['status']}, not {statuses}")


def _start(
    client: httpx.Client, template: str, inputs: dict[str, Any], **more: Any
) -> dict[str, Any]:
    answer = client.post("/v1/runs", json={"template": template, "inputs": inputs, **more})
    assert answer.status_code == 201, answer.text
    return answer.json()


def test_a_run_started_through_the_api_is_advanced_in_the_background(server: Server) -> None:
    with server.client("decide") as client:
        started = _start(client, "ten_nodes", {"seed": 7})
        assert started["run"]["status"] == "queued"
        done = _until(client, started["run"]["run_id"], "succeeded")
    assert [r["node"] for r in done["records"]] == [f"n{i}" for i in range(1, 11)]
    assert all(r["status"] == "succeeded" for r in done["records"])
    assert done["state"]["visited"] == [f"n{i}" for i in range(1, 11)]


def test_runs_are_listed_by_status_template_time_and_input_text(server: Server) -> None:
    with server.client("decide") as client:
        marker = f"needle{time.time_ns()}"
        before = time.time()
        done = _start(client, "ten_nodes", {"seed": 3}, wait=True)
        waiting = _start(client, "blog_post", {"topic": f"the {marker} post"}, wait=True)
        assert waiting["run"]["status"] == "waiting"

        def ids(**params: Any) -> list[str]:
            answer = client.get("/v1/runs", params=params)
            assert answer.status_code == 200, answer.text
            return [r["run_id"] for r in answer.json()["runs"]]

        both = {done["run"]["run_id"], waiting["run"]["run_id"]}
        assert set(ids(since=str(before))) >= both
        assert ids(q=marker) == [waiting["run"]["run_id"]]
        assert ids(q=marker.upper()) == [waiting["run"]["run_id"]]
        assert done["run"]["run_id"] not in ids(status="waiting")
        assert set(ids(status=["waiting", "succeeded"], since=str(before))) >= both
        assert set(ids(status="waiting,succeeded", since=str(before))) >= both
        assert ids(template="blog_post", q=marker) == [waiting["run"]["run_id"]]
        assert ids(until=str(before), q=marker) == []
        bad = client.get("/v1/runs", params={"status": "sleeping"})
        assert bad.status_code == 422 and "sleeping" in json.dumps(bad.json())


def test_pages_follow_a_cursor_or_an_offset_without_gaps(server: Server) -> None:
    with server.client("decide") as client:
        since = str(time.time())
        made = [
            _start(client, "ten_nodes", {"seed": i}, wait=True)["run"]["run_id"] for i in range(5)
        ]
        seen: list[str] = []
        cursor = None
        while True:
            params: dict[str, Any] = {"limit": 2, "since": since}
            if cursor:
                params["cursor"] = cursor
            page = client.get("/v1/runs", params=params).json()
            seen += [r["run_id"] for r in page["runs"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert seen == made[::-1]
        second = client.get("/v1/runs", params={"limit": 2, "offset": 2, "since": since}).json()
        assert [r["run_id"] for r in second["runs"]] == made[::-1][2:4]
        assert client.get("/v1/runs", params={"cursor": "garbage!"}).status_code == 422


def test_a_gate_is_decided_once_by_the_token_named_as_actor(server: Server) -> None:
    with server.client("decide") as decider, server.client("read") as reader:
        run = _start(decider, "blog_post", {"topic": "gates"}, wait=True)
        run_id = run["run"]["run_id"]
        [gate] = run["waiting"]
        assert gate["kind"] == "gate" and gate["name"] == "editor_approval"
        assert run_id in [w["run_id"] for w in reader.get("/v1/pending").json()]
        assert reader.get(f"/v1/runs/{run_id}/pending").json()[0]["wait_id"] == gate["wait_id"]

        refused = reader.post(f"/v1/runs/{run_id}/decide", json={"decision": "approve"})
        assert refused.status_code == 403
        stale = decider.post(
            f"/v1/runs/{run_id}/decide",
            json={"decision": "approve", "attempt": gate["attempt"] + 1},
        )
        assert stale.status_code == 409 and "stale" in stale.json()["detail"]
        changed = decider.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "approve", "state_hash": "0" * 16}
        )
        assert changed.status_code == 409 and "stale" in changed.json()["detail"]
        after_refusals = reader.get(f"/v1/runs/{run_id}").json()
        assert after_refusals["decisions"][0]["status"] == "pending"
        assert after_refusals["decisions"][0]["actor"] is None

        approved = decider.post(
            f"/v1/runs/{run_id}/decide",
            json={
                "decision": "approve",
                "attempt": gate["attempt"],
                "state_hash": gate["state_hash"],
                "note": "ship it",
            },
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["run"]["status"] == "succeeded"
        second = decider.post(f"/v1/runs/{run_id}/decide", json={"decision": "reject"})
        assert second.status_code == 409
        assert "decider" in second.json()["detail"] and "already" in second.json()["detail"]
        shown = reader.get(f"/v1/runs/{run_id}").json()
    [decision] = shown["decisions"]
    assert (decision["actor"], decision["decision"], decision["note"]) == (
        "decider",
        "approve",
        "ship it",
    )


def test_reject_and_changes(server: Server) -> None:
    with server.client("decide") as client:
        rejected = _start(client, "blog_post", {"topic": "no"}, wait=True)["run"]["run_id"]
        answer = client.post(f"/v1/runs/{rejected}/decide", json={"decision": "reject"})
        assert answer.json()["run"]["status"] == "rejected"
        changed = _start(client, "blog_post", {"topic": "again"}, wait=True)["run"]["run_id"]
        no_note = client.post(f"/v1/runs/{changed}/decide", json={"decision": "changes"})
        assert no_note.status_code == 400 and "note" in no_note.json()["detail"]
        again = client.post(
            f"/v1/runs/{changed}/decide", json={"decision": "changes", "note": "shorter"}
        )
        assert again.status_code == 200
        assert again.json()["run"]["status"] == "waiting"  # back at the gate after a redraft
        assert client.get(f"/v1/runs/{changed}").json()["state"]["feedback"]


def test_a_parked_run_is_taken_over_and_only_a_park_gate_takes_a_takeover(
    server: Server,
) -> None:
    with server.client("decide") as client:
        gated = _start(client, "blog_post", {"topic": "mine"}, wait=True)["run"]["run_id"]
        refused = client.post(f"/v1/runs/{gated}/decide", json={"decision": "takeover"})
        assert refused.status_code == 409 and "not a park gate" in refused.json()["detail"]
        run = _start(
            client, "sdlc", {"task": "add a login page", "review_threshold": 1.5}, wait=True
        )
        run_id = run["run"]["run_id"]
        answers = {
            "scope": "a login page at /login with its tests",
            "priority": "normal",
            "done_when": "CI passes",
        }
        parked = client.post(f"/v1/runs/{run_id}/answer", json={"answers": answers})
        assert parked.json()["run"]["status"] == "parked", parked.text
        taken = client.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "takeover", "note": "I'll plan it"}
        )
        assert taken.status_code == 200, taken.text
        assert taken.json()["run"]["status"] == "taken_over"
        events = client.get(f"/v1/runs/{run_id}/events").json()
    [ended] = [e for e in events if e["kind"] == "run.taken_over"]
    assert "by decider (I'll plan it)" in ended["message"]


def test_a_question_set_is_answered_and_checked(server: Server) -> None:
    with server.client("decide") as client:
        run = _start(client, "sdlc", {"task": "add a login page"}, wait=True)
        run_id = run["run"]["run_id"]
        [asked] = run["waiting"]
        assert asked["kind"] == "question"
        wrong = client.post(
            f"/v1/runs/{run_id}/answer",
            json={"answers": {"scope": "login only", "priority": "someday"}},
        )
        assert wrong.status_code == 422 and "priority" in json.dumps(wrong.json())
        assert client.get(f"/v1/runs/{run_id}").json()["questions"][0]["status"] == "pending"
        done = client.post(
            f"/v1/runs/{run_id}/answer",
            json={"answers": {"scope": "login only", "priority": "high"}, "defaults": True},
        )
        assert done.status_code == 200, done.text
        again = client.post(
            f"/v1/runs/{run_id}/answer",
            json={"answers": {"scope": "x"}, "question_id": asked["wait_id"]},
        )
        assert again.status_code == 409 and "decider" in again.json()["detail"]
        shown = client.get(f"/v1/runs/{run_id}").json()
    first = shown["questions"][0]
    assert first["actor"] == "decider" and first["answers"]["priority"] == "high"


def test_events_as_json_and_as_a_resumable_stream(server: Server) -> None:
    with server.client("read") as reader, server.client("decide") as decider:
        run_id = _start(decider, "ten_nodes", {"seed": 2}, wait=True)["run"]["run_id"]
        events = reader.get(f"/v1/runs/{run_id}/events").json()
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
        assert events[-1]["kind"] == "run.succeeded"
        with reader.stream(
            "GET", f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": "5"}
        ) as stream:
            assert stream.headers["content-type"].startswith("text/event-stream")
            text = "".join(stream.iter_text())
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    assert ids == [e["seq"] for e in events if e["seq"] > 5]
    datas = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    assert datas[-1]["kind"] == "run.succeeded"


def test_the_stream_is_live_while_a_run_advances(server: Server) -> None:
    with server.client("decide") as client:
        # `blocking` waits for STAGELINE_TEST_RELEASE; this server has none set: it runs through
        run_id = _start(client, "blocking", {"topic": "live"})["run"]["run_id"]
        with client.stream("GET", f"/v1/runs/{run_id}/events/stream") as stream:
            kinds = [line[7:] for line in stream.iter_lines() if line.startswith("event: ")]
    assert kinds[0] in ("run.queued", "run.started") and kinds[-1] == "run.succeeded"
    assert "node.started" in kinds


def test_bad_input_gets_4xx_with_json_and_no_traceback(server: Server) -> None:
    with server.client("admin") as client:
        cases = [
            (client.post("/v1/runs", json={"template": "ten_nodes", "inputs": "x"}), 422),
            (client.post("/v1/runs", json={"inputs": {}}), 422),
            (
                client.post(
                    "/v1/runs", content=b"{not json", headers={"content-type": "application/json"}
                ),
                422,
            ),
            (client.post("/v1/runs", json={"template": "no_such", "inputs": {}}), 404),
            (client.post("/v1/runs", json={"template": "../../etc/passwd", "inputs": {}}), 422),
            (client.post("/v1/runs", json={"template": "/tmp/x.py", "inputs": {}}), 422),
            (client.post("/v1/runs", json={"template": "ten_nodes", "inputs": {"bogus": 1}}), 422),
            (client.post("/v1/runs", json={"template": "ten_nodes", "run_id": "../x"}), 422),
            (client.get("/v1/runs/nosuchrun"), 404),
            (client.get("/v1/runs/-bad"), 422),
            (client.get("/v1/templates/no_such"), 404),
            (client.post("/v1/runs/nosuchrun/decide", json={"decision": "approve"}), 404),
            (client.post("/v1/runs/nosuchrun/decide", json={"decision": "maybe"}), 422),
            (client.post("/v1/runs/nosuchrun/cancel"), 404),
        ]
        done = _start(client, "ten_nodes", {"seed": 1}, wait=True)["run"]["run_id"]
        cases += [
            (client.post(f"/v1/runs/{done}/cancel"), 409),
            (client.post(f"/v1/runs/{done}/retry"), 409),
            (client.post(f"/v1/runs/{done}/resume"), 409),
            (client.post(f"/v1/runs/{done}/decide", json={"decision": "approve"}), 409),
            (client.post("/v1/runs", json={"template": "ten_nodes", "run_id": done}), 409),
        ]
        for answer, expected in cases:
            assert answer.status_code == expected, (answer.request.url, answer.text)
            assert "detail" in answer.json()
            assert "Traceback" not in answer.text
        missing = client.post("/v1/runs", json={"template": "ten_nodes", "inputs": "x"})
        assert missing.json()["detail"][0]["loc"] == ["body", "inputs"]
        listed = client.get("/v1/runs", params={"template": "no_such"}).json()["runs"]
        assert listed == []  # no refused start left a row


def test_cancel_needs_admin_and_stops_a_running_run(server: Server) -> None:
    with server.client("decide") as decider, server.client("admin") as admin:
        run_id = _start(decider, "blog_post", {"topic": "cancel me"}, wait=True)["run"]["run_id"]
        assert decider.post(f"/v1/runs/{run_id}/cancel").status_code == 403
        answer = admin.post(f"/v1/runs/{run_id}/cancel")
        assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
        assert admin.get(f"/v1/runs/{run_id}/pending").json() == []


def test_templates_and_their_graphs(server: Server) -> None:
    with server.client("read") as client:
        names = [t["name"] for t in client.get("/v1/templates").json()]
        assert {"blog_post", "ten_nodes", "blocking"} <= set(names)
        shown = client.get("/v1/templates/blog_post").json()
        assert shown["gates"] == ["editor_approval"] and "topic" in shown["state_keys"]
        graph = client.get("/v1/templates/blog_post/graph").json()
        edges = {(e["source"], e["target"]) for e in graph["edges"]}
        assert ("editor_approval", "publish") in edges and ("__start__", "research") in edges
        kinds = {n["id"]: n["kind"] for n in graph["nodes"]}
        assert kinds["editor_approval"] == "gate" and kinds["draft"] == "stage"
        mermaid = client.get("/v1/templates/blog_post/mermaid")
        assert mermaid.headers["content-type"].startswith("text/plain")
        assert "editor_approval" in mermaid.text and mermaid.text == graph["mermaid"]


def test_stats_sum_up_outcomes(server: Server) -> None:
    with server.client("decide") as client:
        _start(client, "ten_nodes", {"seed": 9}, wait=True)
        stats = client.get("/v1/stats", params={"template": "ten_nodes"}).json()
    assert stats["outcomes"] >= 10
    assert {n["node"] for n in stats["nodes"]} == {f"n{i}" for i in range(1, 11)}


@pytest.mark.parametrize("header", ["Authorization", "x-api-key"])
def test_both_token_headers_reach_the_api(server: Server, header: str) -> None:
    token = server.tokens["read"]
    value = f"Bearer {token}" if header == "Authorization" else token
    answer = http_get(f"{server.url}/v1/runs", headers={header: value})
    assert answer.status_code == 200


def test_a_stream_stays_open_while_the_run_waits_and_follows_the_decision(
    server: Server,
) -> None:
    import threading

    with server.client("decide") as client:
        run = _start(client, "blog_post", {"topic": "live gate"}, wait=True)
        run_id = run["run"]["run_id"]
        [gate] = run["waiting"]
        kinds: list[str] = []
        saw_wait = threading.Event()

        def listen() -> None:
            with (
                server.client("read") as reader,
                reader.stream("GET", f"/v1/runs/{run_id}/events/stream") as stream,
            ):
                for line in stream.iter_lines():
                    if line.startswith("event: "):
                        kinds.append(line[7:])
                        if line == "event: gate.waiting":
                            saw_wait.set()

        listener = threading.Thread(target=listen)
        listener.start()
        assert saw_wait.wait(60), kinds
        assert listener.is_alive()  # the run waits: the stream stays open
        decided = client.post(
            f"/v1/runs/{run_id}/decide",
            json={"decision": "approve", "attempt": gate["attempt"]},
        )
        assert decided.status_code == 200, decided.text
        listener.join(60)
    assert not listener.is_alive()
    assert kinds.index("gate.decided") > kinds.index("gate.waiting")
    assert kinds[-1] == "run.succeeded"


def test_prune_needs_admin_and_deletes_old_runs(server: Server) -> None:
    with server.client("decide") as decider, server.client("admin") as admin:
        run_id = _start(decider, "ten_nodes", {"seed": 5}, wait=True)["run"]["run_id"]
        refused = decider.post("/v1/prune", json={"older_than": "1s"})
        assert refused.status_code == 403
        assert admin.post("/v1/prune", json={"older_than": "later"}).status_code == 400
        time.sleep(1.5)
        pruned = admin.post("/v1/prune", json={"older_than": "1s", "statuses": ["succeeded"]})
        assert pruned.status_code == 200 and run_id in pruned.json()["pruned"]
        assert pruned.json()["size_after"] is None  # no vacuum asked
        assert admin.get(f"/v1/runs/{run_id}").status_code == 404
        body = {"older_than": "1s", "statuses": ["succeeded"], "vacuum": True}
        vacuumed = admin.post("/v1/prune", json=body).json()
        assert 0 < vacuumed["size_after"] <= vacuumed["size_before"]


def test_history_and_a_fork_at_the_draft_step_with_a_new_topic(server: Server) -> None:
    with server.client("decide") as decider, server.client("admin") as admin:
        run = _start(decider, "blog_post", {"topic": "the original"}, wait=True)
        run_id = run["run"]["run_id"]
        approved = decider.post(f"/v1/runs/{run_id}/decide", json={"decision": "approve"})
        assert approved.json()["run"]["status"] == "succeeded"
        history = decider.get(f"/v1/runs/{run_id}/history").json()
        steps = [c["step"] for c in history]
        assert steps == sorted(steps)
        [draft] = [c["step"] for c in history if "draft" in c["nodes"]][:1]
        body = {"at_step": draft, "changes": {"topic": "a new topic"}, "wait": True}
        assert decider.post(f"/v1/runs/{run_id}/fork", json=body).status_code == 403
        forked = admin.post(f"/v1/runs/{run_id}/fork", json=body)
        assert forked.status_code == 201, forked.text
        fork_id = forked.json()["run"]["run_id"]
        assert fork_id != run_id and forked.json()["run"]["status"] == "waiting"
        fork = admin.get(f"/v1/runs/{fork_id}").json()
        original = admin.get(f"/v1/runs/{run_id}").json()
    assert fork["lineage"]["forked_from"]["parent_run_id"] == run_id
    assert fork["lineage"]["forked_from"]["parent_step"] == draft
    assert [f["run_id"] for f in original["lineage"]["forks"]] == [fork_id]
    assert fork["state"]["topic"] == "a new topic"
    assert original["state"]["topic"] == "the original"
    assert original["run"]["status"] == "succeeded"
    ran = {r["node"] for r in fork["records"]}
    assert "draft" in ran and "research" not in ran and "outline" not in ran
    assert fork["decisions"][0]["status"] == "pending"  # its own decisions
    assert all(d["run_id"] == run_id for d in original["decisions"])
