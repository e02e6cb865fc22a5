"""A deadline's last step in Slack, against a real ``stageline serve`` (SQLite and Postgres)
with Slack's requests signed as Slack signs them (the fixture template
``deadline_question.py``): ``remind -> escalate -> park`` leaves the run ``parked``, says so in
the thread, takes the Answer button off the old message and asks again below (where a person
still answers); ``default`` records the default answers as the deadline's answer."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from test_chat_slack import button, click, serve_with_slack, submit, wait_run

from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)
ANSWER = '"action_id": "answer"'


@pytest.fixture(params=["sqlite", "postgres"])
def chat_server(
    request: pytest.FixtureRequest, tmp_path: Path, slack: FakeSlack
) -> Iterator[Server]:
    server = serve_with_slack(request, tmp_path / "project", slack, "deadline_question.py")
    yield server
    server.kill()


def _said(slack: FakeSlack, run_id: str, words: str) -> dict[str, Any]:
    """The message in the run's thread saying ``words``."""
    return slack.wait_for(
        lambda: next(
            (
                b
                for b in slack.of("chat.postMessage")
                if b.get("thread_ts")
                and words in b.get("text", "")
                and (b.get("metadata") or {}).get("event_payload", {}).get("run_id") == run_id
            ),
            None,
        ),
        what=f"'{words}' in the thread of {run_id}",
    )


def test_park_and_default_at_the_deadline(chat_server: Server, slack: FakeSlack) -> None:
    with chat_server.client("decide") as client:
        answer = client.post(
            "/v1/runs",
            json={
                "template": "deadline_question",
                "inputs": {"topic": "t"},
                "deadlines": {"clarify": "2s", "confirm": "2s"},
            },
        )
    assert answer.status_code == 201, answer.text
    run_id = answer.json()["run"]["run_id"]
    asked, old = button(slack, run_id, "answer")
    time.sleep(2.5)
    chat_server.cli("sweep")
    wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "parked")
    told = _said(slack, run_id, "deadline passed at")
    assert "parked" in told["text"] and told["thread_ts"] == asked["thread_ts"]
    # The old message loses its Answer button; the question is asked again below, with one.
    slack.wait_for(
        lambda: [
            b
            for b in slack.of("chat.update")
            if run_id in b.get("text", "")
            and "asked again below" in json.dumps(b["blocks"])
            and ANSWER not in json.dumps(b["blocks"])
        ],
        what="the old question without its button",
    )
    again = [
        b
        for b in slack.of("chat.postMessage")
        if ANSWER in json.dumps(b.get("blocks")) and run_id in json.dumps(b)
    ]
    assert len(again) == 2 and again[1]["text"] == asked["text"]
    milestones = [b["text"] for b in slack.of("chat.postMessage") if run_id in b.get("text", "")]
    assert not [t for t in milestones if "run.parked" in t]  # told once, by the deadline

    # A person still answers the parked run (the form opened from the new button).
    assert click(chat_server, "answer", old).status_code == 200
    values = {"q:scope": {"value": {"type": "plain_text_input", "value": "the docs"}}}
    assert submit(chat_server, "answer", old, values).status_code == 200
    wait_run(
        chat_server,
        run_id,
        lambda d: d["run"]["status"] == "waiting" and d["waiting"][0]["name"] == "confirm",
    )
    time.sleep(2.5)
    chat_server.cli("sweep")
    done = wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")
    answered = [(q["name"], q["actor"], q["response"]) for q in done["questions"]]
    assert answered[0][:2] == ("clarify", "slack:U1 (alice)")
    assert answered[1][0] == "confirm" and answered[1][1] == "stageline sweep"
    assert answered[1][2]["answers"] == {"tier": "free"}
    defaulted = _said(slack, run_id, "answering with the defaults")
    assert defaulted["thread_ts"] == asked["thread_ts"]
