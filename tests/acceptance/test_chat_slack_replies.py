"""Replies in a run's Slack thread, against a real ``stageline serve`` (SQLite and Postgres)
with Slack's requests signed as Slack signs them: a reply answers a set of several questions
(one line per question, by number or id); every reply gets an answer only its writer sees: not
a decider, not matched (the form offered), recorded, or already answered and by whom."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from test_chat_slack import button, ephemeral, run_detail, serve_with_slack, signed, wait_run

from server_fixtures import Server, http_post

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(params=["sqlite", "postgres"])
def chat_server(
    request: pytest.FixtureRequest, tmp_path: Path, slack: FakeSlack
) -> Iterator[Server]:
    server = serve_with_slack(request, tmp_path / "project", slack, "json_question.py")
    yield server
    server.kill()


def _reply(server: Server, message: dict[str, Any], user: str, text: str) -> None:
    """A signed ``message`` event: ``user`` replies ``text`` in ``message``'s thread."""
    event = {
        "type": "event_callback",
        "event_id": f"Ev{time.time_ns()}",
        "event": {
            "type": "message",
            "channel": message["channel"],
            "user": user,
            "text": text,
            "ts": f"{time.time():.6f}",
            "thread_ts": message["thread_ts"],
        },
    }
    body = json.dumps(event).encode()
    answer = http_post(
        server.url + "/slack/events",
        content=body,
        headers={"Content-Type": "application/json", **signed(body)},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text


def test_a_reply_answers_a_set_of_questions_and_every_reply_is_answered(
    chat_server: Server, slack: FakeSlack
) -> None:
    with chat_server.client("decide") as client:
        answer = client.post("/v1/runs", json={"template": "json_question", "inputs": {}})
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["run"]["run_id"]
    asked, _ = button(slack, run_id, "answer")

    _reply(chat_server, asked, "U9", "1: {}")
    assert "not one of the people allowed" in ephemeral(slack, "U9", "answered nothing")["text"]

    _reply(chat_server, asked, "U1", "sounds good to me")
    offered = ephemeral(slack, "U1", "`N: answer`")
    assert "1: limits, 2: tier" in offered["text"]
    assert any(
        e.get("action_id") == "answer" and f'"r":"{run_id}"' in e.get("value", "")
        for b in offered["blocks"]
        for e in b.get("elements", [])
    )
    assert run_detail(chat_server, run_id)["run"]["status"] == "waiting"

    _reply(chat_server, asked, "U2", '1: {"rps": 5}\ntier: pro')
    done = wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")
    [answered] = [q for q in done["questions"] if q["actor"]]
    assert answered["actor"] == "slack:U2 (bob)"
    assert answered["response"]["answers"] == {"limits": {"rps": 5}, "tier": "pro"}
    ephemeral(slack, "U2", "Recorded your answer")

    _reply(chat_server, asked, "U1", "2: free")
    assert "slack:U2 (bob)" in ephemeral(slack, "U1", "Already answered by")["text"]
