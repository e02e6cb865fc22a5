"""Numbers no field can hold, over a real `stageline serve`: NaN and the infinities in JSON
bodies and query strings, integers past any column, a `Last-Event-ID` that is no seq. Each gets
a 4xx whose body is strict JSON, and changes nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from server_fixtures import Server

HUGE = 10**30
"""Past SQLite's and Postgres' 64-bit integers."""
NOT_JSON_NUMBERS = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]
"""What Python's parser reads as a float that strict JSON cannot write back."""


def _strict(answer: httpx.Response) -> Any:
    """The answer's body, parsed as RFC 8259 JSON (no NaN, no Infinity)."""

    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in {answer.text}")

    assert answer.headers["content-type"].startswith("application/json"), answer.headers
    return json.loads(answer.text, parse_constant=refuse)


def _post_raw(client: httpx.Client, path: str, body: str) -> httpx.Response:
    return client.post(path, content=body.encode(), headers={"content-type": "application/json"})


@pytest.fixture(scope="module")
def waiting(server: Server) -> dict[str, Any]:
    """A blog_post run waiting at its gate."""
    with server.client("decide") as client:
        answer = client.post(
            "/v1/runs", json={"template": "blog_post", "inputs": {"topic": "n"}, "wait": True}
        )
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.mark.parametrize("number", NOT_JSON_NUMBERS)
def test_nan_and_infinities_in_a_json_body_get_422_and_change_nothing(
    server: Server, waiting: dict[str, Any], number: str
) -> None:
    run_id = waiting["run"]["run_id"]
    bodies = {
        f"/v1/runs/{run_id}/decide": f'{{"decision": "approve", "attempt": {number}}}',
        "/v1/runs": f'{{"template": {number}}}',
        "/threads/search": f'{{"limit": {number}}}',
        "/threads": f'{{"metadata": {{"k": {number}}}}}',  # any JSON: nothing typed
        f"/threads/{run_id}/state": f'{{"values": {{"draft": {number}}}}}',
        f"/v1/runs/{run_id}/answer": f'{{"answers": {{"q": [1, {{"x": {number}}}]}}}}',
    }
    with server.client("admin") as client:
        before = client.get("/v1/runs", params={"limit": 500}).json()["runs"]
        threads = client.post("/threads/search", json={"limit": 1000}).json()
        for path, body in bodies.items():
            answer = _post_raw(client, path, body)
            assert answer.status_code == 422, (path, body, answer.text)
            [error] = _strict(answer)["detail"]
            assert error["loc"] == ["body"] and number in error["msg"], error
        # Both content types named: the route would read one, the check reads both.
        twice = client.post(
            "/threads",
            content=f'{{"metadata": {{"k": {number}}}}}'.encode(),
            headers=[("content-type", "text/plain"), ("content-type", "application/json")],
        )
        assert twice.status_code == 422, twice.text
        after = client.get("/v1/runs", params={"limit": 500}).json()["runs"]
        threads_after = client.post("/threads/search", json={"limit": 1000}).json()
        detail = client.get(f"/v1/runs/{run_id}").json()
    assert [r["run_id"] for r in after] == [r["run_id"] for r in before]
    assert sorted(t["thread_id"] for t in threads_after) == sorted(t["thread_id"] for t in threads)
    assert detail["run"]["status"] == waiting["run"]["status"]
    assert [w["wait_id"] for w in detail["waiting"]] == [w["wait_id"] for w in waiting["waiting"]]
    assert not [w for w in detail["decisions"] if w["decision"]]


def test_nan_as_text_or_key_is_plain_json(server: Server) -> None:
    with server.client("decide") as client:
        answer = _post_raw(
            client, "/threads", '{"metadata": {"NaN": "Infinity", "x": "-Infinity 1e400"}}'
        )
    assert answer.status_code == 200, answer.text
    assert _strict(answer)["metadata"] == {"NaN": "Infinity", "x": "-Infinity 1e400"}


@pytest.mark.parametrize("since", ["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
def test_a_non_finite_time_in_a_query_gets_422(server: Server, since: str) -> None:
    with server.client("read") as client:
        for name in ("since", "until"):
            answer = client.get("/v1/runs", params={name: since})
            assert answer.status_code == 422, (name, since, answer.text)
            assert "finite" in _strict(answer)["detail"][0]["msg"]
        assert client.get("/v1/runs", params={"since": "1e9", "until": "7d"}).status_code == 200


def test_integers_past_any_column_get_4xx(server: Server, waiting: dict[str, Any]) -> None:
    _huge_integers_are_refused(server, waiting["run"]["run_id"])


def test_integers_past_any_column_get_4xx_on_postgres(
    serve_project: Callable[..., Server], postgres_url: str
) -> None:
    server = serve_project(database_url=postgres_url, templates=("ten_nodes.py",))
    with server.client("admin") as client:
        run = client.post(
            "/v1/runs", json={"template": "blog_post", "inputs": {"topic": "pg"}, "wait": True}
        ).json()
        run_id = run["run"]["run_id"]
        stored = [  # where any JSON is taken, a huge integer is kept, or refused: never a 500
            client.post("/threads", json={"metadata": {"n": HUGE}}),
            client.post("/v1/runs", json={"template": "ten_nodes", "budget": {"tokens": HUGE}}),
            client.post(f"/threads/{run_id}/state", json={"values": {"draft": HUGE}}),
        ]
        stream = client.get(f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": "1" * 23})
    for answer in stored:
        assert answer.status_code < 500, (answer.request.url, answer.text)
        _strict(answer)
    assert stream.status_code == 422, stream.text
    _huge_integers_are_refused(server, run_id)


def _huge_integers_are_refused(server: Server, run_id: str) -> None:
    """On ``server``, where ``run_id`` waits at a gate."""
    with server.client("admin") as client:
        done = client.post("/v1/runs", json={"template": "ten_nodes", "wait": True}).json()
        done_id = done["run"]["run_id"]
        answers = [
            client.post(f"/v1/runs/{run_id}/decide", json={"decision": "approve", "attempt": HUGE}),
            client.post(
                f"/v1/runs/{run_id}/decide", json={"decision": "approve", "attempt": 2**31}
            ),
            client.post("/v1/runs", json={"template": "ten_nodes", "inputs": {"seed": HUGE}}),
            client.post("/threads/search", json={"limit": HUGE}),
            client.post(f"/threads/{run_id}/history", json={"limit": HUGE}),
            client.post(f"/v1/runs/{done_id}/fork", json={"at_step": HUGE}),
            client.get("/v1/runs", params={"limit": HUGE}),
            client.get("/v1/runs", params={"offset": HUGE}),
            client.get(f"/v1/runs/{done_id}/events", params={"after": HUGE}),
            client.get(f"/v1/runs/{done_id}/events", params={"limit": HUGE}),
            client.get(f"/v1/runs/{done_id}/events/stream", params={"after": HUGE}),
            client.get(f"/threads/{done_id}/runs", params={"limit": HUGE}),
        ]
        for answer in answers:
            assert 400 <= answer.status_code < 500, (answer.request.url, answer.text)
            assert "detail" in _strict(answer)
        # Where a huge number only skips or pages, it is an empty page, not an error.
        for answer in (
            client.post("/threads/search", json={"offset": HUGE}),
            client.post("/assistants/search", json={"offset": HUGE}),
            client.get(f"/threads/{done_id}/runs", params={"offset": HUGE}),
        ):
            assert answer.status_code == 200 and _strict(answer) == [], answer.text
        detail = client.get(f"/v1/runs/{run_id}").json()
    assert not [w for w in detail["decisions"] if w["decision"]]


@pytest.mark.parametrize(
    "last_event_id",
    [b"1" * 23, str(2**53 + 1).encode(), b"abc", b"-1", b"\xb2", b"1.5", b"0x10"],
)
def test_a_last_event_id_that_is_no_seq_gets_422_before_the_stream(
    server: Server, waiting: dict[str, Any], last_event_id: bytes
) -> None:
    run_id = waiting["run"]["run_id"]  # its stream would stay open: the answer comes first
    with server.client("read") as reader:
        answer = reader.get(
            f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": last_event_id}
        )
    assert answer.status_code == 422, answer.text
    [error] = _strict(answer)["detail"]
    assert error["loc"] == ["header", "last-event-id"]


def test_the_stream_resumes_after_any_seq_up_to_the_bound(server: Server) -> None:
    with server.client("read") as reader, server.client("decide") as decider:
        run_id = decider.post("/v1/runs", json={"template": "ten_nodes", "wait": True}).json()[
            "run"
        ]["run_id"]
        seqs = [e["seq"] for e in reader.get(f"/v1/runs/{run_id}/events").json()]
        texts = {}
        for last in ("0", "3", str(2**53)):
            answer = reader.get(f"/v1/runs/{run_id}/events/stream", headers={"Last-Event-ID": last})
            assert answer.status_code == 200, answer.text
            texts[last] = answer.text

    def ids(text: str) -> list[int]:
        return [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]

    assert ids(texts["0"]) == seqs
    assert ids(texts["3"]) == [s for s in seqs if s > 3]
    assert texts[str(2**53)] == "retry: 2000\n\n"  # the run ended; nothing comes after
