"""Webhook sinks against a real HTTP server on 127.0.0.1: Discord, Slack and signed JSON
payloads, and endpoints that fail or never answer without slowing a run."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypedDict

import pytest

from stageline.config import Settings, with_overrides
from stageline.events import verify_signature
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

HOOK_SECRET = "whsec-test-0123456789abcdef"
API_KEY = "sk-test-abcdefghijklmnopqrstuvwxyz"
DISCORD_TOKEN = "discordTOKENpart-xyz987"
SLACK_TOKEN = "slackTOKENpart654"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Hook:
    """A loopback HTTP server that records every POST and answers ``ok``, ``fail`` (HTTP 500)
    or ``hang`` (accepts, reads, never answers until closed)."""

    def __init__(self, mode: str = "ok") -> None:
        self.mode = mode
        self.received: list[Received] = []
        self.release = threading.Event()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                hook.received.append(Received(self.path, dict(self.headers.items()), body))
                if hook.mode == "hang":
                    hook.release.wait(30)
                    return
                self.send_response(500 if hook.mode == "fail" else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}{path}"

    def on(self, path: str) -> list[Received]:
        return [r for r in self.received if r.path == path]

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Iterator[Hook]:
    server = Hook()
    yield server
    server.close()


class S(TypedDict, total=False):
    n: int


def step(name: str, *, sleep: float = 0.0, fail: bool = False, chatty: bool = False) -> Any:
    async def body(state: S, ctx: StageContext) -> dict[str, Any]:
        if sleep:
            await asyncio.sleep(sleep)
        if chatty:  # a careless stage: secrets in its log data and message
            ctx.log.info(
                f"called the API with {API_KEY}",
                api_key=API_KEY,
                headers={"Authorization": f"Bearer {API_KEY}"},
                signing=HOOK_SECRET,
            )
        if fail:
            raise RuntimeError(f"{name} broke while holding {API_KEY}")
        ctx.metric("input_tokens", 10)
        return {"n": state.get("n", 0) + 1}

    body.__name__ = body.__qualname__ = name
    return body


def chain(name: str, count: int, **kw: Any) -> Template:
    template = Template(name, state=S)
    nodes = [f"n{i}" for i in range(count)]
    for node in nodes:
        template.add_stage(node, step(node, **kw))
    return template.add_sequence(*nodes)


def with_sinks(settings: Settings, *tables: dict[str, Any]) -> Settings:
    return with_overrides(settings, sinks=tuple(tables))


# -- payloads ---------------------------------------------------------------------------------


async def test_discord_slack_and_signed_json_reach_a_real_server(
    hook: Hook,
    sqlite_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="stageline")
    discord_url = hook.url(f"/api/webhooks/42/{DISCORD_TOKEN}")
    slack_url = hook.url(f"/services/T0/B0/{SLACK_TOKEN}")
    monkeypatch.setenv("TEST_DISCORD_URL", discord_url)
    monkeypatch.setenv("TEST_SLACK_URL", slack_url)
    monkeypatch.setenv("TEST_HOOK_SECRET", HOOK_SECRET)
    settings = with_sinks(
        sqlite_settings,
        # routine progress to Discord; critical alerts to Slack; everything, signed, as JSON
        {
            "type": "webhook",
            "format": "discord",
            "url_env": "TEST_DISCORD_URL",
            "kinds": ["run.*", "node.*"],
            "linger": 0.05,
        },
        {
            "type": "webhook",
            "format": "slack",
            "url_env": "TEST_SLACK_URL",
            "min_level": "error",
            "linger": 0.05,
        },
        {
            "type": "webhook",
            "format": "json",
            "url": hook.url("/json"),
            "secret_env": "TEST_HOOK_SECRET",
            "min_level": "debug",
            "linger": 0.05,
        },
    )
    settings = with_overrides(settings, sink_exit_timeout=30.0)  # deliver all before exit
    async with Runner.open(settings) as runner:
        good = await runner.start(chain("good", 3, chatty=True), {})
        bad = await runner.start(chain("bad", 2, fail=True), {})
        assert (good.status, bad.status) == (RunStatus.SUCCEEDED, RunStatus.FAILED)
        ledger = {r: await runner.ledger.events(r) for r in (good.run.run_id, bad.run.run_id)}
        deliverer = runner.deliverer
    assert deliverer is not None and deliverer.failures == 0
    assert all(s.dropped == 0 and s.delivered for s in deliverer.stats().values()), (
        deliverer.stats()
    )

    # generic JSON: every event of both runs, seq 1..n, each request signed with the secret
    delivered: dict[str, list[dict[str, Any]]] = {}
    for request in hook.on("/json"):
        headers = {k.lower(): v for k, v in request.headers.items()}
        assert headers["content-type"] == "application/json"
        assert verify_signature(
            HOOK_SECRET,
            body=request.body,
            timestamp=headers["x-stageline-timestamp"],
            signature=headers["x-stageline-signature"],
        )
        assert not verify_signature(
            "not-the-secret",
            body=request.body,
            timestamp=headers["x-stageline-timestamp"],
            signature=headers["x-stageline-signature"],
        )
        assert headers["x-stageline-delivery"]
        payload = request.json()
        assert payload["source"] == "stageline"
        for event in payload["events"]:
            delivered.setdefault(event["run_id"], []).append(event)
    for run_id, written in ledger.items():
        got = delivered[run_id]
        assert [e["seq"] for e in got] == list(range(1, len(written) + 1))
        assert [e["kind"] for e in got] == [e.kind for e in written]
    logged = [e for e in delivered[good.run.run_id] if e["kind"] == "stage.log"]
    assert logged and logged[0]["data"]["api_key"] == "***"

    # Discord: routine progress, one line per event, no log lines
    discord = [r.json() for r in hook.on(f"/api/webhooks/42/{DISCORD_TOKEN}")]
    text = "\n".join(p["content"] for p in discord)
    assert all(
        p["username"] == "stageline" and p["allowed_mentions"] == {"parse": []} for p in discord
    )
    assert f"**run.succeeded** `{good.run.run_id}`" in text
    assert text.count("**node.succeeded**") == 3 and "stage.log" not in text

    # Slack: the critical channel gets the failure only
    slack = [r.json() for r in hook.on(f"/services/T0/B0/{SLACK_TOKEN}")]
    lines = [b["text"]["text"] for p in slack for b in p["blocks"]]
    assert any(f"*run.failed* `{bad.run.run_id}`" in line for line in lines)
    assert any("*node.failed*" in line for line in lines)
    assert not any("succeeded" in line or good.run.run_id in line for line in lines)
    assert all(p["text"] for p in slack)

    # no secret in any payload, header, or line the sinks log
    secrets = (HOOK_SECRET, API_KEY, DISCORD_TOKEN, SLACK_TOKEN)
    for request in hook.received:
        raw = request.body.decode() + json.dumps(request.headers)
        for secret in secrets:
            assert secret not in raw, (request.path, secret)
    for record in caplog.records:
        if not record.name.startswith("stageline.events"):
            continue  # the stage's own logger echoes what the stage said; not a sink's doing
        line = record.getMessage()
        for secret in (*secrets, "/api/webhooks", "/services/T0"):
            assert secret not in line, line


# -- endpoints that fail or never answer ------------------------------------------------------


@pytest.mark.timeout(60)  # a run or a close that waited on the endpoint would hang here
@pytest.mark.parametrize("mode", ["fail", "hang"])
async def test_a_failing_or_hanging_endpoint_holds_nobody_up_and_loses_nothing(
    mode: str,
    sqlite_settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The run ends while the endpoint still fails or hangs; what it costs is measured in
    ``benchmarks/``, not here."""
    caplog.set_level(logging.DEBUG, logger="stageline.events")
    server = Hook(mode)
    try:
        hooked = with_overrides(
            with_sinks(
                sqlite_settings,
                {
                    "type": "webhook",
                    "format": "json",
                    "url": server.url("/hook"),
                    "name": "json",
                    "secret": HOOK_SECRET,
                    "min_level": "debug",
                    "timeout": 0.3,
                    "backoff": 0.05,
                },
                {
                    "type": "webhook",
                    "format": "discord",
                    "url": server.url("/api/webhooks/1/tok"),
                    "name": "discord",
                    "timeout": 0.3,
                    "backoff": 0.05,
                },
            ),
            sink_exit_timeout=0.5,
        )
        async with Runner.open(hooked) as runner:
            summaries = [await runner.start(chain("ten", 10), {}) for _ in range(3)]
            assert all(s.status is RunStatus.SUCCEEDED for s in summaries)
            deliverer = runner.deliverer
            ledger = runner.ledger
            assert deliverer is not None
            waiting = {s.run.run_id: (await ledger.events(s.run.run_id))[-1].seq for s in summaries}
        # The runner closed without waiting for the endpoint's answer ...
        if mode == "hang":
            assert not server.release.is_set()
        assert server.received  # ... which was really tried
        stats = deliverer.stats()
        assert deliverer.failures >= 1
        assert all(s.delivered == 0 and s.dropped == 0 for s in stats.values()), stats
    finally:
        server.close()
    # Nothing is lost: every event waits in the ledger for the next process.
    async with Runner.open(sqlite_settings, deliver=False) as reader:
        for run_id in waiting:
            for sink in ("json", "discord"):
                assert (await reader.ledger.sink_cursor(sink, run_id) or 0) < waiting[run_id]
    failures = [r for r in caplog.records if "delivery of" in r.getMessage()]
    assert failures and all(r.levelno == logging.DEBUG for r in failures)
    assert not any(
        r.levelno > logging.DEBUG for r in caplog.records if r.name.startswith("stageline.events")
    )
    assert not any("/api/webhooks/1/tok" in r.getMessage() for r in caplog.records)
