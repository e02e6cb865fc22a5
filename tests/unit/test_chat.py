"""Two-way chat's logic: decision links, webhook payloads with links, Slack views and the
Slack deliverer's posting once per message."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from stageline.events._formats import discord_payloads, json_payload
from stageline.events._links import DecisionLinks, LinkClaim, LinkRefused
from stageline.ledger import MemoryLedger, Run, RunStatus, Wait, WaitKind, WaitStatus
from stageline.ledger.records import Event
from stageline.server.chat._render import (
    changes_modal,
    gate_blocks,
    modal_answers,
    question_blocks,
    question_modal,
)
from stageline.server.chat._settings import ChatSettings, actor_of
from stageline.server.chat._sink import SlackSink


def _gate(status: WaitStatus = WaitStatus.PENDING, **extra: Any) -> Wait:
    return Wait(
        run_id="r1",
        wait_id="w1",
        kind=WaitKind.GATE,
        name="approval",
        node="approval",
        attempt=1,
        interrupt_id="i1",
        status=status,
        payload={"state_hash": "abc", "changes_to": "draft", "show": {"x": "<b>"}},
        **extra,
    )


def _questions() -> Wait:
    return Wait(
        run_id="r1",
        wait_id="q1",
        kind=WaitKind.QUESTION,
        name="clarify",
        node="clarify",
        attempt=1,
        interrupt_id="i2",
        payload={
            "question_set": {
                "questions": [
                    {"id": "scope", "text": "Scope?", "kind": "text", "required": True},
                    {
                        "id": "prio",
                        "text": "Priority?",
                        "kind": "choice",
                        "choices": ["low", "high"],
                        "default": "low",
                        "required": False,
                    },
                    {
                        "id": "conf",
                        "text": "Config",
                        "kind": "json",
                        "schema": {"type": "object"},
                        "required": True,
                    },
                ]
            }
        },
    )


# -- decision links ----------------------------------------------------------------------------


async def test_a_link_is_checked_and_used_once() -> None:
    links = DecisionLinks("https://ci.example/", MemoryLedger())
    made = await links.for_wait(_gate())
    assert set(made) == {"approve", "reject", "changes"}
    token = made["approve"].rpartition("/")[2]
    assert made["approve"] == f"https://ci.example/links/{token}"
    claim = await links.check(token)
    assert (claim.run_id, claim.wait_id, claim.attempt, claim.state_hash, claim.decision) == (
        "r1",
        "w1",
        1,
        "abc",
        "approve",
    )
    assert await links.use(token) and not await links.use(token)


async def test_tampered_foreign_and_expired_links_are_refused() -> None:
    ledger = MemoryLedger()
    links = DecisionLinks("https://ci.example", ledger)
    token = (await links.for_wait(_gate()))["approve"].rpartition("/")[2]
    body, _, mac = token.partition(".")
    claim = json.loads(__import__("base64").urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    forged_body = json.dumps({**claim, "d": "reject"}, separators=(",", ":")).encode()
    forged = __import__("base64").urlsafe_b64encode(forged_body).decode().rstrip("=")
    for bad, status in (
        (f"{forged}.{mac}", 403),
        (token[:-3] + "xyz", 403),
        ("garbage", 400),
        (f"{body}.", 403),
    ):
        with pytest.raises(LinkRefused) as refused:
            await links.check(bad)
        assert refused.value.status == status
    other = DecisionLinks("https://ci.example", MemoryLedger())  # another server's secret
    with pytest.raises(LinkRefused):
        await other.check(token)
    expired = await links.sign(LinkClaim.from_json({**claim, "e": int(time.time()) - 1}))
    with pytest.raises(LinkRefused) as late:
        await links.check(expired)
    assert late.value.status == 410


async def test_a_gate_without_changes_gets_no_changes_link() -> None:
    gate = _gate()
    plain = Wait(**{**gate.__dict__, "payload": {"state_hash": "abc"}})
    assert set(await DecisionLinks("http://x", MemoryLedger()).for_wait(plain)) == {
        "approve",
        "reject",
    }


async def test_only_a_park_gate_gets_a_takeover_link() -> None:
    gate = _gate()
    links = DecisionLinks("http://x", MemoryLedger())
    assert "takeover" not in await links.for_wait(gate)
    park = Wait(**{**gate.__dict__, "payload": {**gate.payload, "park": {"rounds": 3}}})
    made = await links.for_wait(park)
    assert {"approve", "reject", "takeover"} <= set(made)
    claim = await links.check(made["takeover"].rpartition("/")[2])
    assert (claim.decision, claim.gate) == ("takeover", park.name)


def test_webhook_payloads_carry_the_links_of_waiting_gates() -> None:
    event = Event(run_id="r1", kind="gate.waiting", node="approval", message="waiting", seq=3)
    other = Event(run_id="r1", kind="run.started", seq=2)
    links = {3: {"approve": "https://x/links/a.b", "reject": "https://x/links/c.d"}}
    body = json_payload([other, event], links=links)
    assert "links" not in body["events"][0]
    assert body["events"][1]["links"] == links[3]
    content = discord_payloads([event], links=links)[0]["content"]
    assert "approve: <https://x/links/a.b>" in content
    assert "reject: <https://x/links/c.d>" in content
    assert "links" not in json.dumps(json_payload([event]))


# -- Slack views -------------------------------------------------------------------------------


def test_a_gate_message_has_buttons_while_it_waits_and_says_who_decided_after() -> None:
    _, blocks = gate_blocks(_gate(), "C1")
    actions = [e for b in blocks for e in b.get("elements", [])]
    assert [a["action_id"] for a in actions] == ["approve", "reject", "changes"]
    value = json.loads(actions[0]["value"])
    assert value == {"r": "r1", "w": "w1", "a": 1, "h": "abc", "g": "approval", "c": "C1"}
    assert "&lt;b&gt;" in json.dumps(blocks)  # state shown is escaped, never markup
    _, done = gate_blocks(
        _gate(
            WaitStatus.APPLIED,
            actor="slack:U1 (ann)",
            response={"decision": "reject"},
            decided_at=0.0,
        )
    )
    text = json.dumps(done)
    assert "Rejected" in text and "slack:U1 (ann)" in text and "1970-01-01" in text
    assert not [e for b in done for e in b.get("elements", [])]


def test_a_park_gate_message_has_a_take_over_button() -> None:
    gate = _gate()
    parked = Wait(**{**gate.__dict__, "payload": {**gate.payload, "park": {"loop": "l"}}})
    _, blocks = gate_blocks(parked, "C1")
    actions = [e["action_id"] for b in blocks for e in b.get("elements", [])]
    assert actions == ["approve", "reject", "changes", "takeover"]


def test_question_modal_is_built_from_the_set_and_read_back() -> None:
    wait = _questions()
    view = question_modal("meta", wait)
    types = {b["block_id"]: b["element"]["type"] for b in view["blocks"]}
    assert types == {
        "q:scope": "plain_text_input",
        "q:prio": "static_select",
        "q:conf": "plain_text_input",
    }
    assert view["blocks"][2]["element"]["multiline"] is True
    assert view["blocks"][1]["optional"] is True
    state = {
        "values": {
            "q:scope": {"value": {"type": "plain_text_input", "value": "all"}},
            "q:prio": {"value": {"type": "static_select", "selected_option": {"value": "high"}}},
            "q:conf": {"value": {"type": "plain_text_input", "value": ""}},
        }
    }
    assert modal_answers({"state": state}) == {"scope": "all", "prio": "high"}
    assert changes_modal("meta", "approval")["blocks"][0]["element"]["multiline"] is True
    _, blocks = question_blocks(wait)
    assert "Reply in this thread" not in json.dumps(blocks)  # more than one question


def test_actor_names_the_slack_user() -> None:
    assert actor_of({"id": "U1", "username": "ann"}) == "slack:U1 (ann)"
    assert actor_of({"id": "U1"}) == "slack:U1"


# -- the Slack deliverer -----------------------------------------------------------------------


class Client:
    """Answers like Slack; fails the calls named in ``fail``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail: set[int] = set()

    async def api_call(
        self, method: str, json: dict[str, Any] | None = None, data: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        from slack_sdk.errors import SlackApiError
        from slack_sdk.web.async_slack_response import AsyncSlackResponse

        json = json if json is not None else data or {}
        number = len(self.calls)
        self.calls.append((method, json))
        if method.startswith("conversations."):  # nothing there: the failed post never landed
            return {"ok": True, "messages": []}
        if number in self.fail:
            raise SlackApiError(
                "no",
                AsyncSlackResponse(
                    client=None,
                    http_verb="POST",
                    api_url=method,
                    req_args={},
                    data={"ok": False, "error": "internal_error"},
                    headers={},
                    status_code=200,
                ),
            )
        return {"ok": True, "channel": json.get("channel"), "ts": f"{number}.0"}


async def _ledger_with(run_id: str) -> MemoryLedger:
    """An in-memory ledger holding one queued run."""
    ledger = MemoryLedger()
    await ledger.create_run(
        Run(
            run_id=run_id,
            template="t",
            template_version="1",
            status=RunStatus.QUEUED,
            attempt=1,
            inputs={},
            created_at=time.time(),
            updated_at=time.time(),
        )
    )
    return ledger


async def test_a_batch_retried_after_a_failure_posts_nothing_twice() -> None:
    ledger = await _ledger_with("r1")
    client = Client()
    sink = SlackSink(
        ChatSettings(bot_token="x", signing_secret="y", channel="C1", deciders=("U9",)),
        ledger,
        client=client,
    )
    events = [
        Event(run_id="r1", kind="run.started", seq=1, message="go"),
        Event(run_id="r1", kind="gate.escalated", seq=2, message="late"),
    ]
    client.fail = {3}  # the escalation's post
    with pytest.raises(Exception, match="internal_error"):
        await sink.deliver(events)
    await sink.deliver(events)  # the retry
    posts = [b for m, b in client.calls if m == "chat.postMessage"]
    texts = [p["text"] for p in posts]
    assert len([t for t in texts if "Run `r1`" in t]) == 1  # one root
    assert len([t for t in texts if "run.started" in t]) == 1
    assert [t for t in texts if "late" in t] == ["🚨 <@U9> late", "🚨 <@U9> late"]  # failed, then
    root = await ledger.chat_message("r1", "root")
    assert root is not None and all(p.get("thread_ts") == root.ts for p in posts[1:])
    # Before posting again, the thread was read back for the message (by its metadata).
    [looked] = [b for m, b in client.calls if m == "conversations.replies"]
    assert (looked["ts"], looked["include_all_metadata"]) == (root.ts, "true")
    assert posts[-1]["metadata"]["event_payload"] == {"run_id": "r1", "key": "event:2"}


async def test_ci_runs_and_rebuilds_are_told_in_the_thread() -> None:
    ledger = await _ledger_with("r2")
    client = Client()
    sink = SlackSink(
        ChatSettings(bot_token="x", signing_secret="y", channel="C1"), ledger, client=client
    )
    ci = {"ci_run_id": "r2-ci1"}
    await sink.deliver(
        [
            Event(run_id="r2", kind="stage.log", seq=1, node="build", message="editing"),
            Event(
                run_id="r2",
                kind="stage.log",
                seq=2,
                node="dispatch",
                message="CI run r2-ci1: failure",
                data=ci,
            ),
            Event(
                run_id="r2",
                kind="stage.log",
                seq=3,
                node="verify",
                level="warning",
                message="CI run r2-ci1: failure; back to build",
                data=ci,
            ),
        ]
    )
    told = [b["text"] for m, b in client.calls if m == "chat.postMessage" and b.get("thread_ts")]
    assert told == ["🔧 CI run r2-ci1: failure", "🔧 CI run r2-ci1: failure; back to build"]


def test_the_server_says_when_anyone_may_decide(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("WARNING", logger="stageline.server"):
        ChatSettings(bot_token="x", signing_secret="y").announce()
        ChatSettings(bot_token="x", signing_secret="y", deciders=("U1",)).announce()
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 2 and "ANYONE" in said[0] and "ANYONE" not in said[1]
    assert ChatSettings(deciders=("U1",)).may_decide("U1")
    assert not ChatSettings(deciders=("U1",)).may_decide("U2")
    assert ChatSettings().may_decide("U2")


def test_a_slack_secret_that_is_not_set_is_a_config_error(tmp_path: Any) -> None:
    from stageline.config import load_settings
    from stageline.errors import ConfigError

    (tmp_path / "stageline.toml").write_text('[slack]\nbot_token_env = "NOPE_TOKEN"\n')
    settings = load_settings(tmp_path, env={})
    with pytest.raises(ConfigError, match="NOPE_TOKEN"):
        ChatSettings.of(settings, env={})
    made = ChatSettings.of(settings, env={"NOPE_TOKEN": "xoxb-1"})
    assert made.bot_token == "xoxb-1" and not made.slack  # no signing secret: no Slack app
    assert "xoxb-1" not in repr(made)


def test_a_json_answer_that_does_not_parse_is_shown_on_its_question_in_the_modal() -> None:
    from stageline.errors import AnswerInvalid
    from stageline.server.chat._render import questions_of
    from stageline.server.chat._slack import _blame
    from stageline.stages import validate_answers

    wait = _questions()
    with pytest.raises(AnswerInvalid) as bad:
        validate_answers(questions_of(wait), {"scope": "x", "conf": "{not json"})
    assert list(_blame(str(bad.value), wait)) == ["q:conf"]
    with pytest.raises(AnswerInvalid) as wrong:
        validate_answers(questions_of(wait), {"scope": "x", "conf": "[1]"})  # not an object
    assert list(_blame(str(wrong.value), wait)) == ["q:conf"]


async def test_the_pull_request_is_linked_in_the_thread_in_one_line() -> None:
    ledger = await _ledger_with("r3")
    client = Client()
    sink = SlackSink(
        ChatSettings(bot_token="x", signing_secret="y", channel="C1"), ledger, client=client
    )
    url = "https://github.com/acme/app/pull/10"
    ci = {"ci_run_id": 7, "ci_url": "https://github.com/acme/app/actions/runs/7"}
    await sink.deliver(
        [
            Event(
                run_id="r3",
                kind="stage.log",
                seq=1,
                node="verify",
                message="CI run 7 <main>: success",
                data={**ci, "conclusion": "success"},
            ),
            Event(
                run_id="r3",
                kind="stage.log",
                seq=2,
                node="open_pr",
                message="draft pull request opened",
                data={"pr_url": url, "pr_number": 10, "pr_state": "draft"},
            ),
        ]
    )
    told = [b["text"] for m, b in client.calls if m == "chat.postMessage" and b.get("thread_ts")]
    assert told == [
        f"✅ CI run 7 &lt;main&gt;: success: <{ci['ci_url']}|CI run 7>",
        f"🔀 draft pull request opened: <{url}|pull request #10>",
    ]
