"""Two-way chat against a real ``stageline serve``: Slack's requests signed as Slack signs
them, its Web API a fake on loopback that records what the server posts."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from fake_slack import FakeSlack
from slack_sdk.signature import SignatureVerifier

from server_fixtures import Server, http_get, http_post, make_project

pytestmark = pytest.mark.timeout(300)

SECRET = "test-signing-secret"
TOKEN = "xoxb-test-token"
CHANNEL = "C0CHAN"


@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


CONFIG = """
public_url = "http://127.0.0.1:{port}"

[slack]
bot_token_env = "TEST_SLACK_TOKEN"
signing_secret_env = "TEST_SLACK_SECRET"
channel = "{channel}"
deciders = ["U1", "U2"]
api_url = "{api}"
intake_command = "/new-task"
intake_template = "sdlc"
intake_input = "task"

[[sinks]]
type = "webhook"
format = "json"
url = "{api}hook"
kinds = ["gate.waiting"]
retries = 2
"""
ENV = {"TEST_SLACK_TOKEN": TOKEN, "TEST_SLACK_SECRET": SECRET}


def configure(server: Server, slack: FakeSlack, extra: str = "") -> Server:
    (server.project / "stageline.toml").write_text(
        CONFIG.format(port=server.port, channel=CHANNEL, api=slack.url) + extra
    )
    return server.start()


def serve_with_slack(
    request: pytest.FixtureRequest,
    project: Path,
    slack: FakeSlack,
    *templates: str,
    extra: str = "",
) -> Server:
    """A server for ``project`` (on the database ``request.param`` names) with ``[slack]``
    (and ``extra`` configuration)."""
    url = str(request.getfixturevalue("postgres_url")) if request.param == "postgres" else None
    server = make_project(project, database_url=url, templates=templates, env=ENV)
    return configure(server, slack, extra)


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory: pytest.TempPathFactory, slack: FakeSlack) -> Iterator[Server]:
    server = make_project(
        tmp_path_factory.mktemp("chat") / "project", templates=("deadline_gate.py",), env=ENV
    )
    configure(server, slack)
    yield server
    server.kill()


# -- helpers -----------------------------------------------------------------------------------


def signed(body: bytes, *, stamp: int | None = None, secret: str = SECRET) -> dict[str, str]:
    ts = str(int(time.time()) if stamp is None else stamp)
    sig = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sig}


def post_form(server: Server, path: str, form: dict[str, str], **sign: Any) -> httpx.Response:
    body = urlencode(form).encode()
    headers = {"Content-Type": "application/x-www-form-urlencoded", **signed(body, **sign)}
    return http_post(server.url + path, content=body, headers=headers, timeout=60)


def command(server: Server, command: str, text: str, user: str = "U1") -> httpx.Response:
    return post_form(
        server,
        "/slack/commands",
        {
            "command": command,
            "text": text,
            "user_id": user,
            "user_name": "alice",
            "channel_id": "C0CMD",
            "trigger_id": f"t{time.time_ns()}",
        },
    )


def click(
    server: Server,
    action: str,
    value: str,
    user: str = "U1",
    name: str = "alice",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    payload = {
        "type": "block_actions",
        "user": {"id": user, "username": name},
        "channel": {"id": "C0CMD"},
        "trigger_id": "trig-1",
        "actions": [{"action_id": action, "value": value}],
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return http_post(
        server.url + "/slack/interactions",
        content=body,
        timeout=60,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            **signed(body),
            **(headers or {}),
        },
    )


def submit(
    server: Server, callback: str, value: str, values: dict[str, Any], user: str = "U1"
) -> httpx.Response:
    payload = {
        "type": "view_submission",
        "user": {"id": user, "username": "alice"},
        "view": {"callback_id": callback, "private_metadata": value, "state": {"values": values}},
    }
    body = urlencode({"payload": json.dumps(payload)}).encode()
    return http_post(
        server.url + "/slack/interactions",
        content=body,
        timeout=60,
        headers={"Content-Type": "application/x-www-form-urlencoded", **signed(body)},
    )


def started(answer: httpx.Response) -> str:
    assert answer.status_code == 200, answer.text
    found = re.search(r"run `([^`]+)`", answer.json()["text"])
    assert found, answer.json()
    return found.group(1)


def button(
    slack: FakeSlack, run_id: str, action: str, skip: tuple[str, ...] = ()
) -> tuple[dict[str, Any], str]:
    """The message carrying ``action``'s button for ``run_id`` (none of ``skip``), and the
    button's value."""

    def find() -> tuple[dict[str, Any], str] | None:
        for body in slack.of("chat.postMessage"):
            for block in body.get("blocks") or []:
                for element in block.get("elements", []):
                    value = element.get("value", "")
                    if (
                        element.get("action_id") == action
                        and f'"r":"{run_id}"' in value
                        and value not in skip
                    ):
                        return body, value
        return None

    return slack.wait_for(find, what=f"{action} button of {run_id}")


def run_detail(server: Server, run_id: str) -> dict[str, Any]:
    with server.client("read") as client:
        answer = client.get(f"/v1/runs/{run_id}")
    assert answer.status_code == 200, answer.text
    return answer.json()


def wait_run(server: Server, run_id: str, check: Any, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        detail = run_detail(server, run_id)
        if check(detail):
            return detail
        time.sleep(0.2)
    raise AssertionError(f"run {run_id}: {detail['run']['status']} {detail.get('waiting')}")


def ephemeral(slack: FakeSlack, user: str, words: str) -> dict[str, Any]:
    return slack.wait_for(
        lambda: next(
            (
                b
                for b in slack.of("chat.postEphemeral")
                if b.get("user") == user and words in b.get("text", "")
            ),
            None,
        ),
        what=f"ephemeral {words!r} to {user}",
    )


def waiting_at_gate(detail: dict[str, Any]) -> bool:
    return any(w["kind"] == "gate" for w in detail["waiting"])


# -- the gate flow -----------------------------------------------------------------------------


def test_a_gate_is_posted_in_its_thread_decided_by_a_click_and_the_run_goes_on(
    chat_server: Server, slack: FakeSlack
) -> None:
    run_id = started(command(chat_server, "/stageline", "run blog_post topic=gates"))
    message, value = button(slack, run_id, "approve")
    roots = [
        b
        for b in slack.of("chat.postMessage")
        if run_id in b.get("text", "") and "thread_ts" not in b
    ]
    assert roots and roots[0]["channel"] == "C0CMD"  # the thread opens where the command was
    assert message["thread_ts"]  # the gate is in the run's thread
    assert {"approve", "reject", "changes"} <= {
        e["action_id"] for b in message["blocks"] for e in b.get("elements", [])
    }

    assert click(chat_server, "approve", value).status_code == 200
    detail = wait_run(chat_server, run_id, lambda d: not waiting_at_gate(d))
    decided = [w for w in detail["decisions"] if w["decision"] == "approve"]
    assert [w["actor"] for w in decided] == ["slack:U1 (alice)"]
    slack.wait_for(
        lambda: any(
            "Approved" in json.dumps(b) and "slack:U1" in json.dumps(b)
            for b in slack.of("chat.update")
        ),
        what="updated gate message",
    )
    wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")

    # The same click again (Slack's retry, or a replay) decides nothing twice.
    again = click(chat_server, "approve", value, headers={"X-Slack-Retry-Num": "1"})
    assert again.status_code == 200
    ephemeral(slack, "U1", "Already decided")
    after = run_detail(chat_server, run_id)
    assert len([w for w in after["decisions"] if w["decision"]]) == 1


def test_refusals_change_nothing(chat_server: Server, slack: FakeSlack) -> None:
    run_id = started(command(chat_server, "/stageline", "run blog_post topic=refusals"))
    _, value = button(slack, run_id, "approve")

    # Not one of [slack] deciders.
    assert click(chat_server, "approve", value, user="U3", name="mallory").status_code == 200
    ephemeral(slack, "U3", "not one of the people")
    # A stale button: made on another state, or for another attempt.
    stale = json.loads(value)
    for changed in ({**stale, "h": "0" * 16}, {**stale, "a": stale["a"] + 1}):
        assert click(chat_server, "reject", json.dumps(changed), user="U2").status_code == 200
    ephemeral(slack, "U2", "stale")

    # Forged and expired requests: 401, and nothing is started or decided.
    body = urlencode(
        {
            "payload": json.dumps(
                {
                    "type": "block_actions",
                    "user": {"id": "U1"},
                    "actions": [{"action_id": "approve", "value": value}],
                }
            )
        }
    ).encode()
    forged = http_post(
        chat_server.url + "/slack/interactions",
        content=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            **signed(body, secret="not-the-secret"),
        },
    )
    old = http_post(
        chat_server.url + "/slack/interactions",
        content=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            **signed(body, stamp=int(time.time()) - 600),
        },
    )
    unsigned = http_post(chat_server.url + "/slack/commands", content=b"command=/stageline")
    # A replayed command starts nothing twice.
    replay = urlencode(
        {
            "command": "/stageline",
            "text": "run blog_post topic=replay",
            "user_id": "U1",
            "channel_id": "C0CMD",
            "trigger_id": "t-replay",
        }
    ).encode()
    answers = [
        http_post(
            chat_server.url + "/slack/commands",
            content=replay,
            headers={"Content-Type": "application/x-www-form-urlencoded", **signed(replay)},
        ).json()["text"]
        for _ in range(2)
    ]
    assert answers[0].startswith("Started run") and "handled already" in answers[1]
    assert (forged.status_code, old.status_code, unsigned.status_code) == (401, 401, 401)
    time.sleep(1.0)
    detail = run_detail(chat_server, run_id)
    assert waiting_at_gate(detail)
    assert not [w for w in detail["decisions"] if w["decision"]]

    # The request for changes opens a modal for the note; an empty note is refused in it.
    assert click(chat_server, "changes", value, user="U2").status_code == 200
    view = slack.wait_for(
        lambda: next(
            (b["view"] for b in slack.of("views.open") if b["view"]["callback_id"] == "changes"),
            None,
        )
    )
    empty = submit(
        chat_server,
        "changes",
        view["private_metadata"],
        {"note": {"note": {"type": "plain_text_input", "value": " "}}},
        user="U2",
    )
    assert empty.json()["response_action"] == "errors"
    done = submit(
        chat_server,
        "changes",
        view["private_metadata"],
        {"note": {"note": {"type": "plain_text_input", "value": "shorter"}}},
        user="U2",
    )
    assert done.status_code == 200
    detail = wait_run(
        chat_server, run_id, lambda d: any(w["decision"] == "changes" for w in d["decisions"])
    )
    assert [w["actor"] for w in detail["decisions"] if w["decision"] == "changes"] == [
        "slack:U2 (alice)"
    ]


def test_a_button_of_an_earlier_visit_of_the_gate_decides_nothing(
    chat_server: Server, slack: FakeSlack
) -> None:
    """A button carries the visit it showed: once the run is back at the gate (changes), the
    old message's approve is refused, and the new visit still waits."""
    run_id = started(command(chat_server, "/stageline", "run blog_post topic=visits"))
    _, old = button(slack, run_id, "approve")
    [first] = wait_run(chat_server, run_id, waiting_at_gate)["waiting"]
    assert json.loads(old)["w"] == first["wait_id"]
    with chat_server.client("decide") as client:
        sent = client.post(
            f"/v1/runs/{run_id}/decide",
            json={"decision": "changes", "note": "again", "wait_id": first["wait_id"]},
        )
    assert sent.status_code == 200, sent.text
    [second] = sent.json()["waiting"]
    assert second["wait_id"] != first["wait_id"]
    _, new = button(slack, run_id, "approve", skip=(old,))
    assert json.loads(new)["w"] == second["wait_id"]

    assert click(chat_server, "approve", old, user="U2").status_code == 200
    ephemeral(slack, "U2", "Already decided: changes")
    after = run_detail(chat_server, run_id)
    assert after["run"]["status"] == "waiting"
    assert [w["wait_id"] for w in after["waiting"]] == [second["wait_id"]]
    assert "approve" not in [w["decision"] for w in after["decisions"]]


def test_deadline_steps_go_to_the_thread_and_a_button_from_before_a_retry_is_stale(
    chat_server: Server, slack: FakeSlack
) -> None:
    with chat_server.client("decide") as client:
        answer = client.post(
            "/v1/runs",
            json={
                "template": "deadline_gate",
                "inputs": {"topic": "retry"},
                "deadlines": {"signoff": "3s"},
            },
        )
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["run"]["run_id"]
    gate, old = button(slack, run_id, "approve")
    time.sleep(3.5)
    chat_server.cli("sweep")  # remind, escalate, then fail: the deadline passed
    escalated = slack.wait_for(
        lambda: next(
            (
                b
                for b in slack.of("chat.postMessage")
                if "escalated" in b.get("text", "") and "signoff" in b["text"]
            ),
            None,
        )
    )
    assert escalated["text"].startswith("🚨 <@U1> <@U2> ")  # the deciders are mentioned
    assert any(
        "reminder" in b.get("text", "")
        for b in slack.of("chat.postMessage")
        if b.get("thread_ts") == escalated["thread_ts"]
    )
    assert escalated["thread_ts"] == gate["thread_ts"]  # in the run's thread
    wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "failed")

    with chat_server.client("decide") as client:
        assert client.post(f"/v1/runs/{run_id}/retry").status_code == 200
    _, new = button(slack, run_id, "approve", skip=(old,))
    assert json.loads(new)["a"] == 2
    assert click(chat_server, "approve", old, user="U2").status_code == 200  # attempt 1's
    assert "attempt 2" in ephemeral(slack, "U2", "stale: this approve")["text"]
    assert waiting_at_gate(run_detail(chat_server, run_id))
    assert click(chat_server, "approve", new, user="U2").status_code == 200
    done = wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")
    assert [(w["actor"], w["attempt"]) for w in done["decisions"] if w["decision"]] == [
        ("slack:U2 (alice)", 2)
    ]


# -- questions and /new-task -------------------------------------------------------------------


def test_new_task_starts_sdlc_and_its_questions_are_answered_by_modal_and_thread_reply(
    chat_server: Server, slack: FakeSlack
) -> None:
    run_id = started(command(chat_server, "/new-task", "add a dark mode"))
    assert run_detail(chat_server, run_id)["run"]["template"] == "sdlc"
    message, value = button(slack, run_id, "answer")
    assert click(chat_server, "answer", value).status_code == 200
    view = slack.wait_for(
        lambda: next(
            (b["view"] for b in slack.of("views.open") if b["view"]["private_metadata"] == value),
            None,
        )
    )
    kinds = {b["block_id"]: b["element"]["type"] for b in view["blocks"]}
    assert kinds["q:priority"] == "static_select" and kinds["q:scope"] == "plain_text_input"

    def values(priority: str) -> dict[str, Any]:
        return {
            "q:scope": {"value": {"type": "plain_text_input", "value": "the theme"}},
            "q:priority": {
                "value": {"type": "static_select", "selected_option": {"value": priority}}
            },
        }

    wrong = submit(chat_server, "answer", value, values("whenever"))
    assert wrong.json()["response_action"] == "errors" and "q:priority" in wrong.json()["errors"]
    assert submit(chat_server, "answer", value, values("high")).status_code == 200

    # The short scope brings one free-text question: a reply in the thread answers it.
    follow_up, _ = button(slack, run_id, "answer", skip=(value,))
    assert "Reply in this thread" in json.dumps(follow_up)
    root = next(
        b
        for b in slack.of("chat.postMessage")
        if run_id in b.get("text", "") and "thread_ts" not in b
    )
    thread_ts = message["thread_ts"]
    event = {
        "type": "event_callback",
        "event_id": f"Ev{run_id}",
        "event": {
            "type": "message",
            "channel": root["channel"],
            "user": "U2",
            "text": "the settings page and the CSS",
            "ts": "999.1",
            "thread_ts": thread_ts,
        },
    }
    body = json.dumps(event).encode()
    for retry in ("", "1"):  # Slack's retry of the same event answers nothing twice
        headers = {"Content-Type": "application/json", **signed(body)}
        if retry:
            headers["X-Slack-Retry-Num"] = retry
        assert (
            http_post(chat_server.url + "/slack/events", content=body, headers=headers).status_code
            == 200
        )
    detail = wait_run(
        chat_server,
        run_id,
        lambda d: (
            d["run"]["status"] != "waiting" or len([q for q in d["questions"] if q["actor"]]) >= 2
        ),
    )
    answered = [q for q in detail["questions"] if q["actor"]]
    assert [q["actor"] for q in answered] == ["slack:U1 (alice)", "slack:U2 (bob)"]
    assert answered[1]["response"]["answers"] == {"scope_detail": "the settings page and the CSS"}


def test_url_verification_answers_the_challenge(chat_server: Server) -> None:
    body = json.dumps({"type": "url_verification", "challenge": "abc123"}).encode()
    answer = http_post(
        chat_server.url + "/slack/events",
        content=body,
        headers={"Content-Type": "application/json", **signed(body)},
    )
    assert answer.status_code == 200 and answer.json() == {"challenge": "abc123"}


def test_a_command_without_trigger_id_replayed_in_the_window_starts_nothing_twice(
    chat_server: Server,
) -> None:
    topic = f"no-trigger-{time.time_ns()}"
    body = urlencode(
        {
            "command": "/stageline",
            "text": f"run blog_post topic={topic}",
            "user_id": "U1",
            "channel_id": "C0CMD",
        }
    ).encode()
    stamp = int(time.time()) - 30  # inside the five-minute window

    def send(at: int) -> str:
        answer = http_post(
            chat_server.url + "/slack/commands",
            content=body,
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                **signed(body, stamp=at),
            },
            timeout=60,
        )
        assert answer.status_code == 200, answer.text
        return str(answer.json()["text"])

    first, replay = send(stamp), send(stamp)
    assert first.startswith("Started run") and "handled already" in replay
    # The same words typed again later are a new command (Slack signs a new timestamp).
    assert send(stamp + 10).startswith("Started run")
    with chat_server.client("read") as client:
        runs = client.get("/v1/runs", params={"q": topic, "limit": 50}).json()["runs"]
    assert len(runs) == 2


@pytest.mark.parametrize("body", [b"[1, 2]", b'"event_callback"', b"null", b"7"])
def test_a_signed_events_body_that_is_no_json_object_gets_400(
    chat_server: Server, body: bytes
) -> None:
    answer = http_post(
        chat_server.url + "/slack/events",
        content=body,
        headers={"Content-Type": "application/json", **signed(body)},
    )
    assert answer.status_code == 400 and "not a JSON object" in answer.json()["detail"]
    event = json.dumps(
        {"type": "event_callback", "event_id": f"Ev{time.time_ns()}", "event": [1]}
    ).encode()
    answer = http_post(
        chat_server.url + "/slack/events",
        content=event,
        headers={"Content-Type": "application/json", **signed(event)},
    )
    assert answer.status_code == 200
    form = urlencode({"payload": body.decode()}).encode()
    answer = http_post(
        chat_server.url + "/slack/interactions",
        content=form,
        headers={"Content-Type": "application/x-www-form-urlencoded", **signed(form)},
    )
    assert answer.status_code == 400 and "not a JSON object" in answer.json()["detail"]


# -- Slack down, then back ---------------------------------------------------------------------


def test_messages_wait_while_slack_fails_and_are_posted_when_it_is_back(
    chat_server: Server, slack: FakeSlack
) -> None:
    slack.down = True
    try:
        with chat_server.client("decide") as client:
            answer = client.post(
                "/v1/runs", json={"template": "blog_post", "inputs": {"topic": "outage"}}
            )
        assert answer.status_code == 201, answer.text
        run_id = answer.json()["run"]["run_id"]
        wait_run(chat_server, run_id, waiting_at_gate)
        time.sleep(1.0)
        assert not [b for b in slack.of("chat.postMessage") if run_id in json.dumps(b)]
    finally:
        slack.down = False
    slack.fail_next = 2  # it comes back with a few errors still
    _, value = button(slack, run_id, "approve")
    roots = [
        b
        for b in slack.of("chat.postMessage")
        if run_id in b.get("text", "") and "thread_ts" not in b
    ]
    assert len(roots) == 1 and roots[0]["channel"] == CHANNEL
    assert click(chat_server, "approve", value).status_code == 200
    wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")


# -- decision links ----------------------------------------------------------------------------


def _link(slack: FakeSlack, run_id: str, decision: str) -> str:
    def find() -> str | None:
        for body in slack.of("hook"):
            for event in body.get("events", []):
                if event["run_id"] == run_id and event.get("links"):
                    return str(event["links"][decision])
        return None

    return str(slack.wait_for(find, what=f"{decision} link of {run_id}"))


def test_a_decision_link_confirms_on_get_and_decides_once_on_post(
    chat_server: Server, slack: FakeSlack
) -> None:
    with chat_server.client("decide") as client:
        run_id = client.post(
            "/v1/runs", json={"template": "blog_post", "inputs": {"topic": "links"}}
        ).json()["run"]["run_id"]
    link = _link(slack, run_id, "approve")
    assert link.startswith(chat_server.url + "/links/")
    page = http_get(link)
    assert page.status_code == 200 and "Confirm" in page.text and "<form method=post>" in page.text
    assert waiting_at_gate(run_detail(chat_server, run_id))  # a GET decides nothing

    body, _, _mac = link.rpartition("/")[2].partition(".")
    tampered = link.replace(body, body[:-2] + ("A" if body[-2] != "A" else "B") + body[-1])
    assert http_get(tampered).status_code in (400, 403)
    assert http_post(tampered).status_code in (400, 403)
    assert waiting_at_gate(run_detail(chat_server, run_id))

    done = http_post(link, data={"note": "looks good"}, timeout=60)
    assert done.status_code == 200, done.text
    detail = run_detail(chat_server, run_id)
    assert [w["actor"] for w in detail["decisions"] if w["decision"] == "approve"] == [
        "link:approve"
    ]
    again = http_post(link, timeout=60)
    assert again.status_code == 409 and "cannot decide" in again.text
    reject = _link(slack, run_id, "reject")
    assert http_post(reject, timeout=60).status_code == 409


def test_a_park_gate_has_a_takeover_link_that_ends_the_run_taken_over(
    chat_server: Server, slack: FakeSlack
) -> None:
    answers = {"scope": "a login page at /login", "priority": "normal", "done_when": "CI passes"}
    with chat_server.client("decide") as client:
        run_id = client.post(
            "/v1/runs",
            json={"template": "sdlc", "inputs": {"task": "add login", "review_threshold": 1.5}},
        ).json()["run"]["run_id"]
        wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "waiting")
        client.post(f"/v1/runs/{run_id}/answer", json={"answers": answers})
    wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "parked")
    link = _link(slack, run_id, "takeover")
    page = http_get(link)
    assert page.status_code == 200 and "Take over at gate plan_parked?" in page.text
    assert "taken_over" in page.text and run_detail(chat_server, run_id)["run"]["status"] == (
        "parked"
    )  # a GET decides nothing
    done = http_post(link, data={"note": "I will plan it"}, timeout=60)
    assert done.status_code == 200 and "now taken_over" in done.text, done.text
    detail = run_detail(chat_server, run_id)
    assert detail["run"]["status"] == "taken_over"
    assert [(w["decision"], w["actor"]) for w in detail["decisions"]][-1] == (
        "takeover",
        "link:takeover",
    )


def test_an_expired_link_is_refused(chat_server: Server, slack: FakeSlack) -> None:
    import asyncio

    from stageline.events._links import DecisionLinks, LinkClaim

    with chat_server.client("decide") as client:
        run_id = client.post(
            "/v1/runs", json={"template": "blog_post", "inputs": {"topic": "expiry"}}
        ).json()["run"]["run_id"]
    link = _link(slack, run_id, "approve")
    token = link.rpartition("/")[2]
    claim = json.loads(
        __import__("base64").urlsafe_b64decode(
            token.partition(".")[0] + "=" * (-len(token.partition(".")[0]) % 4)
        )
    )

    class Ledger:  # the secret the server keeps in its ledger
        async def chat_secret(self, name: str) -> str:
            import sqlite3

            db = chat_server.project / ".stageline" / "stageline.db"
            with sqlite3.connect(db) as conn:
                return str(
                    conn.execute(
                        "select value from stageline_chat_secrets where name=?", (name,)
                    ).fetchone()[0]
                )

    links = DecisionLinks(chat_server.url, Ledger())  # type: ignore[arg-type]
    old = LinkClaim.from_json({**claim, "e": int(time.time()) - 60})
    expired = asyncio.run(links.sign(old))
    assert expired != token
    page = http_get(f"{chat_server.url}/links/{expired}")
    assert page.status_code == 410 and "expired" in page.text
    assert http_post(f"{chat_server.url}/links/{expired}").status_code == 410
    assert waiting_at_gate(run_detail(chat_server, run_id))
    assert Path(chat_server.project).exists()


# -- Postgres ----------------------------------------------------------------------------------


def test_the_gate_flow_on_postgres(serve_project: Any, postgres_url: str) -> None:
    slack = FakeSlack()
    try:
        server = configure(serve_project(database_url=postgres_url, env=ENV, start=False), slack)
        run_id = started(command(server, "/stageline", "run blog_post topic=postgres"))
        _, value = button(slack, run_id, "approve")
        assert click(server, "reject", value, user="U2", name="bo").status_code == 200
        done = wait_run(server, run_id, lambda d: d["run"]["status"] == "rejected")
        assert [w["actor"] for w in done["decisions"] if w["decision"]] == ["slack:U2 (bo)"]
        slack.wait_for(lambda: any("Rejected" in json.dumps(b) for b in slack.of("chat.update")))
        assert click(server, "reject", value, user="U2").status_code == 200
        ephemeral(slack, "U2", "Already decided")
    finally:
        slack.close()
