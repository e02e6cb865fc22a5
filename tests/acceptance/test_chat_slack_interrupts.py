"""A graph's own ``interrupt()`` in Slack, against a real ``stageline serve`` with Slack's
requests signed as Slack signs them: a plain value is answered by a reply in the run's thread,
an Agent-Inbox ``HumanInterrupt`` by its Accept button; each answer is recorded with the Slack
user as actor."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fake_slack import FakeSlack
from test_chat_slack import ENV, button, click, command, configure, signed, started, wait_run

from server_fixtures import Server, make_project

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


@pytest.fixture
def chat_server(tmp_path: Any, slack: FakeSlack) -> Iterator[Server]:
    server = make_project(tmp_path / "project", templates=("interrupts.py",), env=ENV)
    configure(server, slack)
    yield server
    server.kill()


def _asking(slack: FakeSlack, run_id: str) -> dict[str, Any]:
    """The message that asks the run's plain interrupt."""
    return slack.wait_for(
        lambda: next(
            (
                b
                for b in slack.of("chat.postMessage")
                if f"Run `{run_id}` asks at" in b.get("text", "")
                and "which colour" in json.dumps(b)
            ),
            None,
        ),
        what=f"the interrupt message of {run_id}",
    )


def test_a_reply_answers_an_interrupt_and_a_button_accepts_a_human_interrupt(
    chat_server: Server, slack: FakeSlack
) -> None:
    run_id = started(command(chat_server, "/stageline", "run interrupts topic=fence"))
    message = _asking(slack, run_id)
    assert "Reply in this thread to answer" in json.dumps(message)
    event = {
        "type": "event_callback",
        "event_id": f"Ev{run_id}",
        "event": {
            "type": "message",
            "channel": message["channel"],
            "user": "U2",
            "text": "teal &amp; grey",
            "ts": "999.1",
            "thread_ts": message["thread_ts"],
        },
    }
    body = json.dumps(event).encode()
    headers = {"Content-Type": "application/json", **signed(body)}
    sent = httpx.post(chat_server.url + "/slack/events", content=body, headers=headers)
    assert sent.status_code == 200

    inbox, value = button(slack, run_id, "inbox_accept")
    elements = [e["action_id"] for b in inbox["blocks"] for e in b.get("elements", [])]
    assert elements == ["inbox_accept", "inbox_ignore"]
    assert "Paint it?" in json.dumps(inbox) and "Reply in this thread to respond" in json.dumps(
        inbox
    )
    assert click(chat_server, "inbox_accept", value, user="U1").status_code == 200
    detail = wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")
    assert detail["state"]["colour"] == "teal & grey"
    assert detail["state"]["verdict"] == [{"type": "accept", "args": None}]
    assert [(w["actor"], w["status"]) for w in detail["interrupts"]] == [
        ("slack:U2 (bob)", "applied"),
        ("slack:U1 (alice)", "applied"),
    ]
