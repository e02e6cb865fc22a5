"""A graph's own ``interrupt()`` in Slack, against a real ``stageline serve`` (on SQLite and on
Postgres) with Slack's requests signed as Slack signs them: a plain value is answered by a reply
in the run's thread, an Agent-Inbox ``HumanInterrupt`` by its Accept button (the fixture
template ``interrupts.py``); the corpus's plain LangGraph graphs (``tests/fixtures/
langgraph_project``) likewise: ``ask_name``'s subgraph ``interrupt()`` and ``inbox``'s
``HumanInterrupt`` answered by thread replies (the second as its ``response``); each answer is
recorded with the Slack user as actor."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from test_chat_slack import button, click, command, serve_with_slack, signed, started, wait_run

from server_fixtures import Server, http_post

pytestmark = pytest.mark.timeout(300)

CORPUS = Path(__file__).parents[1] / "fixtures" / "langgraph_project"


@pytest.fixture(params=["sqlite", "postgres"])
def chat_server(
    request: pytest.FixtureRequest, tmp_path: Path, slack: FakeSlack
) -> Iterator[Server]:
    shutil.copytree(CORPUS, tmp_path / "project")  # its langgraph.json, beside templates/
    server = serve_with_slack(request, tmp_path / "project", slack, "interrupts.py")
    yield server
    server.kill()


def _asking(slack: FakeSlack, run_id: str, words: str) -> dict[str, Any]:
    """The message that asks the run's interrupt (saying ``words``)."""
    return slack.wait_for(
        lambda: next(
            (
                b
                for b in slack.of("chat.postMessage")
                if f"Run `{run_id}` asks at" in b.get("text", "") and words in json.dumps(b)
            ),
            None,
        ),
        what=f"the interrupt message of {run_id}",
    )


def _reply(server: Server, message: dict[str, Any], text: str, user: str) -> None:
    """``user`` replies ``text`` in the thread of ``message``."""
    event = {
        "type": "event_callback",
        "event_id": f"Ev{message['thread_ts']}{user}",
        "event": {
            "type": "message",
            "channel": message["channel"],
            "user": user,
            "text": text,
            "ts": "999.1",
            "thread_ts": message["thread_ts"],
        },
    }
    body = json.dumps(event).encode()
    headers = {"Content-Type": "application/json", **signed(body)}
    assert http_post(server.url + "/slack/events", content=body, headers=headers).status_code == 200


def _answered(detail: dict[str, Any]) -> list[tuple[str, str, Any]]:
    return [(w["actor"], w["status"], w["answer"]) for w in detail["interrupts"]]


def test_a_reply_answers_an_interrupt_and_a_button_accepts_a_human_interrupt(
    chat_server: Server, slack: FakeSlack
) -> None:
    run_id = started(command(chat_server, "/stageline", "run interrupts topic=fence"))
    asks = started(command(chat_server, "/stageline", "run ask_name"))
    inbox = started(command(chat_server, "/stageline", 'run inbox email="the invoice"'))
    message = _asking(slack, run_id, "which colour")
    assert "Reply in this thread to answer" in json.dumps(message)
    _reply(chat_server, message, "teal &amp; grey", "U2")

    confirm, value = button(slack, run_id, "inbox_accept")
    elements = [e["action_id"] for b in confirm["blocks"] for e in b.get("elements", [])]
    assert elements == ["inbox_accept", "inbox_ignore"]
    shown = json.dumps(confirm)
    assert "Paint it?" in shown and "Reply in this thread to respond" in shown
    assert "To accept with edits" not in shown  # its config allows no edit
    assert click(chat_server, "inbox_accept", value, user="U1").status_code == 200
    detail = wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")
    assert detail["state"]["colour"] == "teal & grey"
    assert detail["state"]["verdict"] == [{"type": "accept", "args": None}]
    assert [(actor, status) for actor, status, _ in _answered(detail)] == [
        ("slack:U2 (bob)", "applied"),
        ("slack:U1 (alice)", "applied"),
    ]

    _reply(chat_server, _asking(slack, asks, "What is your name?"), "Ada", "U2")
    detail = wait_run(chat_server, asks, lambda d: d["run"]["status"] == "succeeded")
    assert detail["state"]["greeting"] == "Hello, Ada"
    assert [(r["node"], r["status"]) for r in detail["records"]] == [
        ("prepare", "succeeded"),
        ("asker", "succeeded"),
        ("asker/ask", "succeeded"),
        ("greet", "succeeded"),
    ]
    assert _answered(detail) == [("slack:U2 (bob)", "applied", "Ada")]

    message = _asking(slack, inbox, "Send this reply?")
    elements = [e["action_id"] for b in message["blocks"] for e in b.get("elements", [])]
    assert elements == ["inbox_accept", "inbox_ignore"]  # edit: the dashboard, API or CLI
    assert "To accept with edits" in json.dumps(message)
    _reply(chat_server, message, "Which invoice?", "U1")
    detail = wait_run(chat_server, inbox, lambda d: d["run"]["status"] == "succeeded")
    assert detail["state"]["reply"] == "Thanks for: the invoice"
    assert [(r["node"], r["status"]) for r in detail["records"]] == [
        ("draft", "succeeded"),
        ("review", "succeeded"),
    ]
    assert _answered(detail) == [
        (
            "slack:U1 (bob)",
            "applied",
            [{"type": "response", "args": "Which invoice?"}],
        )  # users.info
    ]
