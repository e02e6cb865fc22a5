"""What `/new-task` and the Slack deliverer keep whatever Slack does, against a real
``stageline serve`` (SQLite and Postgres) with Slack's requests signed as Slack signs them: the
intake command's text is always the task (never a sub-command), with the repository the
project or the channel names; a run started while Slack is
down gets its thread where the command was typed; a post Slack took but answered after the
client's timeout is found again by its metadata, not posted twice."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_slack import FakeSlack
from test_chat_slack import (
    CHANNEL,
    button,
    click,
    command,
    post_form,
    run_detail,
    serve_with_slack,
    started,
    wait_run,
)

from server_fixtures import Server

pytestmark = pytest.mark.timeout(300)
APPROVE = '"action_id": "approve"'


@pytest.fixture(params=["sqlite", "postgres"])
def chat_server(
    request: pytest.FixtureRequest, tmp_path: Path, slack: FakeSlack
) -> Iterator[Server]:
    repos = (tmp_path / "everyone", tmp_path / "cmd")
    for repo in repos:  # sdlc builds in a git checkout
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        who = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
        subprocess.run(
            ["git", "-C", str(repo), *who, "commit", "-q", "--allow-empty", "-m", "start"],
            check=True,
        )
    extra = (
        f"\n[slack.intake_defaults]\nrepo = {json.dumps(str(repos[0]))}\n"
        f"\n[slack.channel_defaults.C0CMD]\nrepo = {json.dumps(str(repos[1]))}\n"
    )
    server = serve_with_slack(request, tmp_path / "project", slack, "deadline_gate.py", extra=extra)
    yield server
    server.kill()


def _tagged(slack: FakeSlack, run_id: str, key: str) -> list[dict[str, Any]]:
    """The messages posted for ``run_id`` showing ``key`` (by the metadata each carries)."""
    return [
        b
        for b in slack.of("chat.postMessage")
        if (b.get("metadata") or {}).get("event_payload") == {"run_id": run_id, "key": key}
    ]


def test_new_task_text_starting_with_run_is_the_task(chat_server: Server) -> None:
    text = "run the calc tests on every push"
    run_id = started(command(chat_server, "/new-task", text))
    run = run_detail(chat_server, run_id)["run"]
    assert run["template"] == "sdlc" and run["inputs"]["task"] == text
    # The repository: the channel's default (C0CMD, where it was typed) over the project's.
    assert Path(run["inputs"]["repo"]).name == "cmd"
    elsewhere = post_form(
        chat_server,
        "/slack/commands",
        {
            "command": "/new-task",
            "text": "add a dark mode",
            "user_id": "U1",
            "channel_id": "C0OTHER",
            "trigger_id": f"t{time.time_ns()}",
        },
    )
    inputs = run_detail(chat_server, started(elsewhere))["run"]["inputs"]
    assert Path(inputs["repo"]).name == "everyone" and inputs["task"] == "add a dark mode"


def test_a_thread_starts_where_the_command_was_typed_even_after_an_outage(
    chat_server: Server, slack: FakeSlack
) -> None:
    slack.down = True
    try:
        run_id = started(command(chat_server, "/new-task", "add a dark mode"))
    finally:
        slack.down = False
    _, value = button(slack, run_id, "answer")
    assert '"c":"C0CMD"' in value
    roots = _tagged(slack, run_id, "root")
    assert len(roots) == 1 and roots[0]["channel"] == "C0CMD" != CHANNEL
    assert all(m["channel"] == "C0CMD" for m in slack.messages if run_id in json.dumps(m))


def test_a_post_slack_took_but_answered_late_is_not_posted_again(
    chat_server: Server, slack: FakeSlack
) -> None:
    # The root (found again in the channel's history), then the gate in its thread (found again
    # in the thread's replies): each taken by Slack and answered after the client gave up.
    slack.slow = lambda method, body: method == "chat.postMessage" and "thread_ts" not in body
    run_id = started(command(chat_server, "/stageline", "run blog_post topic=late"))
    slack.slow = lambda method, body: method == "chat.postMessage" and "thread_ts" in body
    _, value = button(slack, run_id, "approve")
    looked = slack.wait_for(lambda: slack.of("conversations.replies"), what="a look back")
    assert looked[0]["include_all_metadata"] == "true"
    assert slack.of("conversations.history")[0]["include_all_metadata"] == "true"
    assert click(chat_server, "approve", value).status_code == 200
    wait_run(chat_server, run_id, lambda d: d["run"]["status"] == "succeeded")
    assert len(_tagged(slack, run_id, "root")) == 1
    gates = [b for b in slack.of("chat.postMessage") if APPROVE in json.dumps(b.get("blocks"))]
    assert len([b for b in gates if run_id in json.dumps(b)]) == 1
    # The gate's message was known again: the decision updated it (its buttons gone).
    assert slack.wait_for(
        lambda: [
            b
            for b in slack.of("chat.update")
            if run_id in json.dumps(b) and APPROVE not in json.dumps(b.get("blocks"))
        ],
        what="the decided gate's update",
    )
