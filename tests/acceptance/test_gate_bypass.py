"""No door moves a run past a gate without a recorded decision (issue 22, items 1 and 8).

A real ``stageline serve`` over SQLite and over Postgres. Each test makes a ``blog_post`` run
that waits at its gate ``editor_approval`` and tries one route that writes state or resumes it:
the LangGraph routes, ``/v1/``, the dashboard's forms. Whatever it answers, the run still waits
at the same visit of the gate, with no decision in the ledger, its gate record waiting and
nothing published; a refusal is a 409 JSON body naming the gate and the route that decides it.
Decisions bind to the visit they were made on, over HTTP as on the CLI (``wait_id``).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from dashboard_browser import http_session
from server_fixtures import Server, make_project

pytestmark = pytest.mark.timeout(300)

GATE = "editor_approval"
EDITED = "EDITED: nobody approved this"


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    url = request.getfixturevalue("postgres_module_url") if request.param == "postgres" else None
    server = make_project(
        tmp_path_factory.mktemp(f"gates-{request.param}"),
        database_url=url,
        templates=("gated_flaky.py",),
    )
    try:
        yield server.start()
    finally:
        server.kill()


# -- helpers -----------------------------------------------------------------------------------


def _start(server: Server, topic: str, template: str = "blog_post") -> dict[str, Any]:
    inputs = {"topic": topic} if template == "blog_post" else {}
    with server.client("decide") as client:
        made = client.post("/v1/runs", json={"template": template, "inputs": inputs, "wait": True})
    assert made.status_code == 201, made.text
    return dict(made.json())


def _waiting(server: Server, topic: str) -> tuple[str, str]:
    """A blog_post run waiting at its gate: its id and the visit's wait id."""
    made = _start(server, topic)
    assert made["run"]["status"] == "waiting"
    [wait] = made["waiting"]
    assert wait["name"] == GATE
    return made["run"]["run_id"], wait["wait_id"]


def _shown(server: Server, run_id: str) -> dict[str, Any]:
    with server.client("read") as client:
        answer = client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _refused(answer: httpx.Response, run_id: str, name: str = GATE) -> None:
    """A 409 with a JSON body naming the gate and the route that decides it."""
    assert answer.status_code == 409, answer.text
    assert answer.headers["content-type"].startswith("application/json")
    detail = answer.json()["detail"]
    assert f"gate {name!r}" in detail and f"POST /v1/runs/{run_id}/decide" in detail, detail


def _still_waiting(server: Server, run_id: str, wait_id: str) -> None:
    """The run waits at the same visit of the gate: nothing decided, nothing published."""
    shown = _shown(server, run_id)
    assert shown["run"]["status"] == "waiting"
    assert [(w["wait_id"], w["status"]) for w in shown["waiting"]] == [(wait_id, "pending")]
    visit = [w["response"] for w in shown["decisions"] if w["wait_id"] == wait_id]
    assert visit and visit == [None] * len(visit)  # this visit: asked, never decided
    assert "approve" not in [(w["response"] or {}).get("decision") for w in shown["decisions"]]
    records = {r["node"]: r["status"] for r in shown["records"]}
    assert records[GATE] == "waiting" and "publish" not in records
    assert "post_path" not in shown["state"] and shown["state"]["draft"] != EDITED
    assert not (server.project / ".stageline" / "runs" / run_id / "post.md").exists()


def _approve(server: Server, run_id: str, wait_id: str) -> dict[str, Any]:
    with server.client("decide") as client:
        done = client.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "approve", "wait_id": wait_id}
        )
    assert done.status_code == 200, done.text
    return dict(done.json())


# -- the LangGraph routes ----------------------------------------------------------------------


def test_update_state_as_the_gate_or_any_node_is_refused(served: Server) -> None:
    run_id, wait_id = _waiting(served, "update state")
    with served.client("read") as reader:
        history = reader.post(f"/threads/{run_id}/history", json={"limit": 100}).json()
    oldest = history[-1]["checkpoint"]["checkpoint_id"]
    bodies: list[dict[str, Any]] = [
        {"values": {"draft": EDITED}, "as_node": GATE},  # the reported bypass
        {"values": {"draft": EDITED}},
        {"values": {"draft": EDITED}, "as_node": "publish"},
        {"values": {"draft": EDITED}, "as_node": "aggregate"},
        {"values": {"draft": EDITED}, "as_node": "__start__"},
        {"values": {"draft": EDITED}, "as_node": "__end__"},
        # (no values as "__end__" is Agent Inbox's resolve: an audited reject of its own, never a
        # pass; tests/acceptance/test_langgraph_inbox.py)
        {"values": {"draft": EDITED}, "as_node": GATE, "checkpoint_id": oldest},
        {"values": {"no_such_key": 1}, "as_node": GATE},
    ]
    for scope in ("decide", "admin"):
        with served.client(scope) as client:
            for body in bodies:
                _refused(client.post(f"/threads/{run_id}/state", json=body), run_id)
    _still_waiting(served, run_id, wait_id)
    done = _approve(served, run_id, wait_id)  # the decision path still works
    assert done["run"]["status"] == "succeeded" and done["state"]["draft"] != EDITED


@pytest.mark.parametrize("path", ["runs", "runs/wait", "runs/stream"])
def test_a_run_with_command_update_or_goto_is_refused(served: Server, path: str) -> None:
    run_id, wait_id = _waiting(served, f"command {path}")
    commands: list[dict[str, Any]] = [
        {"update": {"draft": EDITED}},
        {"goto": "publish"},
        {"update": {"draft": EDITED}, "goto": "publish", "resume": "approve"},
    ]
    with served.client("decide") as client:
        for command in commands:
            answer = client.post(
                f"/threads/{run_id}/{path}", json={"assistant_id": "blog_post", "command": command}
            )
            _refused(answer, run_id)
    _still_waiting(served, run_id, wait_id)


def test_a_resume_that_is_no_decision_moves_nothing(served: Server) -> None:
    run_id, wait_id = _waiting(served, "resume")
    interrupt = _shown(served, run_id)["waiting"][0]["interrupt_id"]
    with served.client("decide") as client:
        for resume in ({"draft": EDITED}, {interrupt: {"draft": EDITED}}, "publish"):
            answer = client.post(
                f"/threads/{run_id}/runs/wait",
                json={"assistant_id": "blog_post", "command": {"resume": resume}},
            )
            assert answer.status_code == 422, answer.text
        for body in ({}, {"input": {"draft": EDITED}}):  # no command, or input: not a resume
            answer = client.post(
                f"/threads/{run_id}/runs/wait", json={"assistant_id": "blog_post", **body}
            )
            assert answer.status_code == 409, answer.text
    _still_waiting(served, run_id, wait_id)


# -- /v1/ --------------------------------------------------------------------------------------


def test_v1_resume_and_retry_of_a_waiting_run_do_not_pass_the_gate(served: Server) -> None:
    run_id, wait_id = _waiting(served, "v1 resume")
    with served.client("decide") as client:
        resumed = client.post(f"/v1/runs/{run_id}/resume")  # the gate asks again, as it was
        assert resumed.status_code == 200, resumed.text
        assert [w["wait_id"] for w in resumed.json()["waiting"]] == [wait_id]
        assert client.post(f"/v1/runs/{run_id}/retry").status_code == 409
    _still_waiting(served, run_id, wait_id)


def test_state_changes_never_land_past_a_passed_gate(served: Server) -> None:
    """A finished run is forked, never edited (the LangGraph route refuses it): a fork with
    changes starts before the gate it passed (and asks again there), through ``/v1/``."""
    run_id, wait_id = _waiting(served, "forks")
    done = _approve(served, run_id, wait_id)
    assert done["run"]["status"] == "succeeded"
    with served.client("read") as reader:
        history = reader.get(f"/v1/runs/{run_id}/history").json()
    at_gate = next(c for c in history if c["nodes"] == [GATE])
    before_gate = next(c for c in history if c["next"] == [GATE])
    with served.client("admin") as admin:
        runs_before = len(admin.get("/v1/runs", params={"limit": 200}).json()["runs"])
        edited = admin.post(
            f"/threads/{run_id}/state",
            json={"values": {"draft": EDITED}, "checkpoint_id": at_gate["checkpoint_id"]},
        )
        # The LangGraph route changes no finished thread at all (its 409 names that rule).
        assert edited.status_code == 409
        assert "a finished run cannot change" in edited.json()["detail"]
        forked = admin.post(
            f"/v1/runs/{run_id}/fork",
            json={"at_step": at_gate["step"] + 1, "changes": {"draft": EDITED}, "wait": True},
        )
        assert forked.status_code == 409 and GATE in forked.json()["detail"]
        with _signed_in(served, "admin") as dashboard:
            page = dashboard.get(f"/ui/runs/{run_id}").text
            csrf = re.search(r'name="csrf" value="([^"]+)"', page)
            assert csrf is not None
            notice = _post(
                dashboard,
                run_id,
                "fork",
                {
                    "csrf": csrf.group(1),
                    "at_step": str(at_gate["step"] + 1),
                    "changes": '{"draft": "x"}',
                },
            )
            assert "without a recorded decision" in notice
        assert len(admin.get("/v1/runs", params={"limit": 200}).json()["runs"]) == runs_before
        asks = admin.post(
            f"/v1/runs/{run_id}/fork",
            json={
                "checkpoint_id": before_gate["checkpoint_id"],
                "changes": {"draft": EDITED},
                "wait": True,
            },
        )
    assert asks.status_code == 201, asks.text
    fork = asks.json()
    assert fork["run"]["status"] == "waiting" and fork["state"]["draft"] == EDITED
    assert [w["name"] for w in fork["waiting"]] == [GATE]
    assert _shown(served, fork["run"]["run_id"])["decisions"][0]["response"] is None


def test_a_failed_runs_edit_cannot_skip_its_gate(served: Server) -> None:
    """A run that failed past its gate: an edit as the gate, as a node past it, or as the node
    that wrote its checkpoint (the gate) is refused; as a node before the gate, the gate asks
    again on retry."""
    made = _start(served, "", template="gated_flaky")
    run_id = made["run"]["run_id"]
    [first] = made["waiting"]
    with served.client("decide") as client:
        failed = client.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "approve", "wait_id": first["wait_id"]}
        ).json()
        assert failed["run"]["status"] == "failed" and failed["run"]["failed_node"] == "publish"
        for as_node in (None, "approval", "publish"):
            answer = client.post(
                f"/threads/{run_id}/state", json={"values": {"text": EDITED}, "as_node": as_node}
            )
            assert answer.status_code == 409, answer.text
            assert "approval" in answer.json()["detail"]
        edited = client.post(
            f"/threads/{run_id}/state", json={"values": {"text": EDITED}, "as_node": "write"}
        )
        assert edited.status_code == 200, edited.text
        (served.project / "ok.flag").write_text("")
        try:
            again = client.post(f"/v1/runs/{run_id}/retry").json()
        finally:
            (served.project / "ok.flag").unlink()
    assert again["run"]["status"] == "waiting" and again["state"]["text"] == EDITED
    [second] = again["waiting"]
    assert second["name"] == "approval" and second["wait_id"] != first["wait_id"]
    assert second["response"] is None and "published" not in again["state"]


# -- the dashboard -----------------------------------------------------------------------------


@contextmanager
def _signed_in(server: Server, scope: str) -> Iterator[httpx.Client]:
    """A dashboard session (signed in with the token of ``scope``) as an httpx client."""
    with http_session(server.url, server.tokens[scope], headers={"Origin": server.url}) as client:
        yield client


def _fields(page: str, action: str) -> dict[str, str]:
    """The hidden fields of the form posting to ``action`` on ``page``."""
    form = re.search(rf'<form[^>]*action="[^"]*{re.escape(action)}"[^>]*>(.*?)</form>', page, re.S)
    assert form is not None, f"no form for {action}"
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', form.group(1))
    return {name: html.unescape(value) for name, value in hidden}


def _post(client: httpx.Client, run_id: str, action: str, form: dict[str, str]) -> str:
    """Post a form of the run page; the notice the run page shows after it."""
    answer = client.post(f"/ui/runs/{run_id}/{action}", data=form)
    assert answer.status_code == 303, answer.text
    page = client.get(f"/ui/runs/{run_id}").text
    notices = re.findall(r'data-notice="[^"]*">(.*?)</div>', page, re.S)
    return html.unescape(" ".join(notices))


def test_dashboard_forms_move_nothing_past_the_gate(served: Server) -> None:
    run_id, wait_id = _waiting(served, "dashboard")
    with _signed_in(served, "admin") as client:
        page = client.get(f"/ui/runs/{run_id}").text
        shown = _fields(page, f"/runs/{run_id}/decide")
        assert shown["wait_id"] == wait_id and shown["gate"] == GATE
        csrf = shown["csrf"]
        assert "approve, reject" in _post(client, run_id, "decide", {**shown, "decision": "x"})
        _post(client, run_id, "resume", {"csrf": csrf})
        notice = _post(client, run_id, "fork", {"csrf": csrf, "changes": '{"draft": "x"}'})
    _still_waiting(served, run_id, wait_id)
    fork = re.search(r"as (\S+)$", notice.strip())  # a fork with changes asks again
    assert fork is not None, notice
    forked = _shown(served, fork.group(1))
    assert forked["run"]["status"] in ("queued", "running", "waiting")
    assert [w["response"] for w in forked["decisions"]] == [None] * len(forked["decisions"])


# -- decisions bind to the visit they were made on (item 8) ------------------------------------


def _changes(server: Server, run_id: str, wait_id: str) -> str:
    """Request changes at visit ``wait_id``; the run comes back to the gate: the new visit."""
    with server.client("decide") as client:
        sent = client.post(
            f"/v1/runs/{run_id}/decide",
            json={"decision": "changes", "note": "shorter", "wait_id": wait_id},
        )
    assert sent.status_code == 200, sent.text
    [again] = sent.json()["waiting"]
    assert again["name"] == GATE and again["wait_id"] != wait_id
    return str(again["wait_id"])


def test_api_decide_binds_to_the_visit_it_names(served: Server) -> None:
    run_id, first = _waiting(served, "api binding")
    seen = _shown(served, run_id)["waiting"][0]["requested_at"]
    second = _changes(served, run_id, first)
    with served.client("decide") as client:
        for stale in ({"wait_id": first}, {"seen_at": seen}):
            late = client.post(f"/v1/runs/{run_id}/decide", json={"decision": "approve", **stale})
            assert late.status_code == 409, late.text
            assert "changes" in late.json()["detail"]  # names the decision that won
        unknown = client.post(
            f"/v1/runs/{run_id}/decide", json={"decision": "approve", "wait_id": "nope"}
        )
        assert unknown.status_code == 409
    _still_waiting(served, run_id, second)
    assert _approve(served, run_id, second)["run"]["status"] == "succeeded"


def test_a_dashboard_decision_binds_to_the_visit_its_page_showed(served: Server) -> None:
    run_id, first = _waiting(served, "dashboard binding")
    with _signed_in(served, "decide") as client:
        old_page = _fields(client.get(f"/ui/runs/{run_id}").text, f"/runs/{run_id}/decide")
        assert old_page["wait_id"] == first
        second = _changes(served, run_id, first)
        notice = _post(client, run_id, "decide", {**old_page, "decision": "approve"})
        assert "already" in notice.lower() and "changes" in notice
        _still_waiting(served, run_id, second)
        new_page = _fields(client.get(f"/ui/runs/{run_id}").text, f"/runs/{run_id}/decide")
        assert new_page["wait_id"] == second
        notice = _post(client, run_id, "decide", {**new_page, "decision": "approve"})
    assert "approve" in notice and _shown(served, run_id)["run"]["status"] == "succeeded"
