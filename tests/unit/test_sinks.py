"""Sinks without a network: filters, redaction, config, message formats, queued delivery."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

import stageline.events as events_pkg
from stageline.config import load_settings
from stageline.errors import ConfigError
from stageline.events import (
    ConsoleSink,
    DeliveryError,
    DeliveryPolicy,
    EventBus,
    EventFilter,
    OtelSink,
    Redactor,
    SinkSpec,
    WebhookSink,
    build_sinks,
    register_sink_type,
    sign_payload,
    verify_signature,
)
from stageline.events._formats import DISCORD_LIMIT, discord_payloads, slack_payloads
from stageline.events._redact import is_secret_key, mask_url
from stageline.ledger import Event, EventCategory
from stageline.testing import RecordingSink


def ev(
    kind: str = "node.succeeded",
    *,
    level: str = "info",
    seq: int = 1,
    run: str = "r1",
    **fields: Any,
) -> Event:
    return Event(run_id=run, kind=kind, level=level, seq=seq, **fields)


def test_public_api_is_what_all_says() -> None:
    exported = {n for n in dir(events_pkg) if not n.startswith("_")} - {"annotations"}
    assert exported == set(events_pkg.__all__)


# -- filters ----------------------------------------------------------------------------------


def test_a_filter_takes_levels_at_or_above_its_threshold() -> None:
    flt = EventFilter(min_level="error")
    assert [
        flt.accepts(ev(level=lv)) for lv in ("debug", "info", "warning", "error", "critical")
    ] == [False, False, False, True, True]
    assert EventFilter(min_level="info").accepts(ev(level="odd"))  # unknown ranks as info
    with pytest.raises(ValueError, match="unknown level"):
        EventFilter(min_level="loud")


def test_a_filter_matches_kind_globs_and_categories() -> None:
    flt = EventFilter.of(kinds=["run.*", "gate.*"])
    assert flt.accepts(ev("run.failed")) and flt.accepts(ev("gate.escalated"))
    assert not flt.accepts(ev("node.started"))
    quiet = EventFilter.of(kinds=["!stage.*"])
    assert quiet.accepts(ev("run.started")) and not quiet.accepts(ev("stage.log"))
    runs_not_waiting = EventFilter.of(kinds=["run.*", "!run.waiting"])
    assert runs_not_waiting.accepts(ev("run.failed"))
    assert not runs_not_waiting.accepts(ev("run.waiting"))
    assert not runs_not_waiting.accepts(ev("node.failed"))
    errors = EventFilter.of(categories=["error"])
    assert errors.accepts(ev(category=EventCategory.ERROR))
    assert not errors.accepts(ev())


# -- redaction --------------------------------------------------------------------------------


def test_secret_keys_are_told_from_token_counts() -> None:
    for key in (
        "api_key",
        "apiKey",
        "OPENAI_API_KEY",
        "token",
        "access_token",
        "password",
        "Authorization",
        "client_secret",
        "x-auth",
        "github_token",
        "cookie",
    ):
        assert is_secret_key(key), key
    for key in (
        "input_tokens",
        "output_tokens",
        "max_tokens",
        "author",
        "monkey",
        "keys",
        "template",
        "duration",
    ):
        assert not is_secret_key(key), key


def test_redaction_masks_secret_values_at_any_depth_and_in_text() -> None:
    redactor = Redactor(["hunter2-signing"])
    event = ev(
        message="posting to https://bob:pa55word@example.com/x?token=abc123&page=2 "
        "with Bearer eyJhbGciOi.xyz and sk-abcdefghijklmnop1234",
        data={
            "api_key": "sk-live",
            "nested": {
                "password": "p",
                "ok": 1,
                "list": [{"Authorization": "Basic Zm9v"}, "the secret is hunter2-signing"],
            },
            "metrics": {"input_tokens": 12.0},
        },
    )
    clean = redactor.event(event)
    text = json.dumps(clean.to_dict())
    for secret in (
        "sk-live",
        "pa55word",
        "abc123",
        "eyJhbGciOi",
        "sk-abcdefghijklmnop1234",
        "Zm9v",
        "hunter2-signing",
        '"p"',
    ):
        assert secret not in text, secret
    assert clean.data["metrics"] == {"input_tokens": 12.0}
    assert "page=2" in clean.message and "bob:***@example.com" in clean.message
    assert event.data["api_key"] == "sk-live"  # the ledger's copy is untouched


def test_an_event_without_secrets_is_passed_as_it_is() -> None:
    event = ev(message="all good", data={"duration": 0.1, "metrics": {"input_tokens": 3}})
    assert Redactor().event(event) is event


def test_webhook_urls_are_logged_by_host_only() -> None:
    assert mask_url("https://discord.com/api/webhooks/1/tok?wait=true") == "https://discord.com"
    assert mask_url("https://u:p@hooks.slack.com/services/T/B/X") == "https://hooks.slack.com"
    text = Redactor().text(
        "see https://discord.com/api/webhooks/123/SeCrEt-tok_en and "
        "https://hooks.slack.com/services/T0/B0/XyZ"
    )
    assert "SeCrEt" not in text and "XyZ" not in text


# -- config -----------------------------------------------------------------------------------


def test_sinks_are_built_from_toml_tables() -> None:
    specs = build_sinks(
        [
            {
                "type": "webhook",
                "format": "discord",
                "url_env": "HOOK",
                "min_level": "info",
                "kinds": ["run.*", "node.*"],
                "name": "progress",
            },
            {
                "type": "webhook",
                "format": "json",
                "url": "http://127.0.0.1:9/x",
                "secret_env": "SIGNING",
                "min_level": "error",
                "retries": 5,
                "backoff": 0.1,
            },
            {"type": "console", "min_level": "warning", "categories": ["error"]},
            {"type": "webhook", "url": "http://x", "enabled": False},
        ],
        env={"HOOK": "https://discord.com/api/webhooks/1/tok", "SIGNING": "s3cr3t-value"},
    )
    assert len(specs) == 3
    discord, signed, console = specs
    assert isinstance(discord.sink, WebhookSink) and discord.sink.format == "discord"
    assert discord.sink.name == "progress"
    assert discord.filter == EventFilter(min_level="info", kinds=("run.*", "node.*"))
    assert discord.policy is not None and discord.policy.linger > 0
    assert isinstance(signed.sink, WebhookSink) and "s3cr3t-value" in signed.sink.secrets
    assert signed.policy is not None and (signed.policy.retries, signed.policy.backoff) == (5, 0.1)
    assert signed.filter.min_level == "error"
    assert isinstance(console.sink, ConsoleSink) and console.filter.categories == ("error",)
    assert "tok" not in discord.sink.name and "tok" not in repr(discord.sink)


README_TOML = """
database_url = "memory://"

# Routine progress to Discord (a message per burst of events)
[[sinks]]
type = "webhook"
format = "discord"
url_env = "DISCORD_WEBHOOK_URL"   # the URL is a credential: keep it out of the file
min_level = "info"
kinds = ["run.*", "node.*", "gate.*"]

# Critical alerts (run failed, gate escalated) to Slack
[[sinks]]
type = "webhook"
format = "slack"
url_env = "SLACK_ALERTS_WEBHOOK_URL"
min_level = "error"

# Every event but stage logs, as signed JSON, to your own service
[[sinks]]
type = "webhook"
format = "json"
url = "https://ops.example.com/stageline/events"
secret_env = "STAGELINE_WEBHOOK_SECRET"
min_level = "debug"
kinds = ["*", "!stage.log"]
retries = 5

# A span per run and per node, over OTLP/HTTP (pip install 'stageline[otel]')
[[sinks]]
type = "otel"
endpoint = "http://localhost:4318/v1/traces"
service_name = "stageline"

# Warnings and worse on the terminal (stderr)
[[sinks]]
type = "console"
min_level = "warning"
"""


def test_the_readme_example_loads(tmp_path: Path) -> None:
    (tmp_path / "stageline.toml").write_text(README_TOML)
    settings = load_settings(cwd=tmp_path, env={})
    env = {
        "DISCORD_WEBHOOK_URL": "https://discord.com/api/webhooks/1/x",
        "SLACK_ALERTS_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/y",
        "STAGELINE_WEBHOOK_SECRET": "0123456789abcdef",
    }
    bus = EventBus.configured(settings.sinks, env=env)
    assert [type(s).__name__ for s in bus.sinks] == [
        "ConsoleSink",
        "WebhookSink",
        "WebhookSink",
        "WebhookSink",
        "OtelSink",
    ]
    assert list(bus.stats()) == [
        "discord:https://discord.com",
        "slack:https://hooks.slack.com",
        "json:https://ops.example.com",
        "otel",
    ]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"type": "pager"}, "type must be one of"),
        ({"type": "webhook"}, "url .or url_env. is required"),
        ({"type": "webhook", "url": "http://x", "format": "teams"}, "format must be one of"),
        ({"type": "webhook", "url": "ftp://x"}, "must start with http"),
        ({"type": "webhook", "url": "http://x", "min_level": "loud"}, "min_level must be"),
        ({"type": "webhook", "url": "http://x", "kinds": "run.*", "retries": -1}, "retries"),
        ({"type": "webhook", "url": "http://x", "secert": "typo"}, "unknown key 'secert'"),
        ({"type": "webhook", "url": "http://x", "secret_env": "NOPE"}, "NOPE .* is not set"),
        ({"type": "webhook", "url": "http://x", "format": "slack", "secret": "s"}, "json format"),
        ({"type": "console", "stream": "printer"}, "stderr or stdout"),
    ],
)
def test_a_bad_sink_table_is_a_config_error(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        build_sinks([table], env={})
    assert "[[sinks]] #1" in str(caught.value)


def test_a_config_error_never_echoes_a_secret() -> None:
    with pytest.raises(ConfigError) as caught:
        build_sinks([{"type": "webhook", "url": "ftp://user:hunter2@x", "format": "json"}], env={})
    assert "hunter2" not in str(caught.value)


def test_a_sink_type_is_registered_explicitly() -> None:
    made: list[dict[str, Any]] = []

    def factory(*, options: Any, policy: DeliveryPolicy, **future_kwargs: Any) -> RecordingSink:
        made.append({"channel": options.get("channel", str), "policy": policy})
        return RecordingSink()

    register_sink_type("recording", factory, min_level="warning")
    try:
        [spec] = build_sinks([{"type": "recording", "channel": "ops"}], env={})
    finally:
        from stageline.events._config import _TYPES

        _TYPES.pop("recording")
    assert made[0]["channel"] == "ops" and spec.filter.min_level == "warning"


def test_the_otel_module_imports_without_opentelemetry() -> None:
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ImportError('blocked')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from stageline.events import build_sinks, OtelSink\n"
        "from stageline.errors import ConfigError\n"
        "build_sinks([{'type': 'webhook', 'url': 'http://127.0.0.1:9'}])\n"
        "try:\n"
        "    build_sinks([{'type': 'otel'}])\n"
        "except ConfigError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "pip install 'stageline[otel]'" in out.stdout


def test_an_otel_sink_needs_no_endpoint() -> None:
    assert OtelSink().name == "otel"


# -- formats and signatures -------------------------------------------------------------------


def test_discord_messages_stay_under_its_limit_and_mention_no_one() -> None:
    many = [
        ev("stage.log", seq=i, node="draft", message="@everyone " + "x" * 300) for i in range(1, 40)
    ]
    payloads = discord_payloads(many)
    assert len(payloads) > 1
    for payload in payloads:
        assert len(payload["content"]) <= DISCORD_LIMIT
        assert payload["allowed_mentions"] == {"parse": []}
    assert sum(p["content"].count("stage.log") for p in payloads) == 39


def test_slack_messages_have_blocks_and_fallback_text() -> None:
    payloads = slack_payloads([ev("run.failed", level="critical", message="a < b & c")] * 60)
    assert [len(p["blocks"]) for p in payloads] == [50, 10]
    first = payloads[0]
    assert first["text"].startswith("🚨 *run.failed*") and "(+49 more)" in first["text"]
    assert "a &lt; b &amp; c" in first["blocks"][0]["text"]["text"]


def test_a_signature_verifies_only_with_the_secret_and_a_fresh_timestamp() -> None:
    body, now = b'{"events":[]}', time.time()
    stamp = str(int(now))
    signature = sign_payload("k3y-value", stamp, body)
    assert signature.startswith("sha256=") and len(signature) == 7 + 64
    assert verify_signature("k3y-value", body=body, timestamp=stamp, signature=signature)
    assert not verify_signature("other", body=body, timestamp=stamp, signature=signature)
    assert not verify_signature("k3y-value", body=body + b" ", timestamp=stamp, signature=signature)
    assert not verify_signature(
        "k3y-value", body=body, timestamp=stamp, signature=signature, now=now + 3600
    )


def test_http_answers_map_to_retry_decisions() -> None:
    import httpx

    from stageline.events._webhook import _status_error

    assert _status_error(httpx.Response(503)).retryable
    limited = _status_error(httpx.Response(429, headers={"Retry-After": "2"}))
    assert limited.retryable and limited.retry_after == 2.0 and limited.reason == "HTTP 429"
    assert not _status_error(httpx.Response(404)).retryable
    policy = DeliveryPolicy(backoff=1.0, max_backoff=4.0)
    assert policy.delay(0, 120.0) == 4.0  # a server's Retry-After, capped
    assert all(0.5 * min(4.0, 2**n) <= policy.delay(n) <= min(4.0, 2**n) for n in range(5))


# -- the bus and queued delivery --------------------------------------------------------------


class ScriptedSink:
    """An async sink that fails ``fail`` times, or hangs, then records what it got."""

    def __init__(self, *, fail: int = 0, hang: bool = False, retryable: bool = True) -> None:
        self.name = "scripted"
        self.fail, self.hang, self.retryable = fail, hang, retryable
        self.batches: list[list[Event]] = []
        self.calls = 0
        self.closed = False

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        self.calls += 1
        if self.hang:
            await asyncio.sleep(3600)
        if self.fail:
            self.fail -= 1
            raise DeliveryError("HTTP 500", retryable=self.retryable)
        self.batches.append(list(events))

    async def aclose(self, **future_kwargs: Any) -> None:
        self.closed = True

    @property
    def seqs(self) -> list[int]:
        return [e.seq for batch in self.batches for e in batch]


FAST = DeliveryPolicy(retries=3, backoff=0.001, timeout=1.0)


async def test_queued_delivery_retries_with_backoff_then_delivers() -> None:
    sink = ScriptedSink(fail=2)
    bus = EventBus([SinkSpec(sink=sink, policy=FAST)])
    bus.publish([ev(seq=i) for i in (1, 2, 3)])
    assert await bus.flush(2.0)
    assert sink.seqs == [1, 2, 3] and sink.calls == 3
    stats = bus.stats()["scripted"]
    assert (stats.delivered, stats.failures, stats.retries, stats.dropped) == (3, 2, 2, 0)
    assert bus.failures == 2
    await bus.aclose(1.0)
    assert sink.closed


async def test_a_batch_is_given_up_after_its_retries_or_a_final_error() -> None:
    sink = ScriptedSink(fail=10)
    bus = EventBus([SinkSpec(sink=sink, policy=DeliveryPolicy(retries=2, backoff=0.001))])
    bus.publish([ev()])
    await bus.flush(2.0)
    assert (bus.stats()["scripted"].failures, bus.stats()["scripted"].dropped) == (3, 1)
    final = ScriptedSink(fail=10, retryable=False)
    bus2 = EventBus([SinkSpec(sink=final, policy=FAST)])
    bus2.publish([ev()])
    await bus2.flush(2.0)
    assert final.calls == 1 and bus2.stats()["scripted"].dropped == 1
    await bus.aclose(0.1)
    await bus2.aclose(0.1)


@pytest.mark.timeout(30)
async def test_a_hanging_sink_never_blocks_publish_and_close_is_bounded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="stageline.events")
    sink = ScriptedSink(hang=True)
    bus = EventBus([SinkSpec(sink=sink, policy=DeliveryPolicy(queue_size=10, timeout=60))])
    for i in range(1, 1001):  # none of them waits: a publish that did would hang the test
        bus.publish([ev(seq=i)])
    await asyncio.sleep(0.01)
    await bus.aclose(timeout=0.2)  # bounded though the sink hangs for good
    stats = bus.stats()["scripted"]
    assert stats.offered == 1000 and stats.delivered == 0 and stats.dropped == 1000
    assert sink.closed
    assert any("dropped" in r.getMessage() for r in caplog.records)
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "stageline.events")
    bus.publish([ev(seq=1001)])  # after close: dropped and counted, not raised
    assert bus.stats()["scripted"].dropped == 1001


async def test_inline_sinks_are_filtered_and_their_failures_counted() -> None:
    class Broken:
        def emit(self, event: Event, **future_kwargs: Any) -> None:
            raise OSError("terminal gone")

    kept = RecordingSink()
    bus = EventBus([SinkSpec(sink=kept, filter=EventFilter(min_level="error")), Broken()])
    bus.publish([ev(level="info"), ev("run.failed", level="critical", seq=2)])
    assert kept.kinds() == ["run.failed"] and bus.failures == 2


async def test_sinks_see_events_redacted_with_the_secrets_they_were_given() -> None:
    kept = RecordingSink()
    bus = EventBus([SinkSpec(sink=kept, secrets=("my-signing-secret",))])
    bus.publish([ev(message="leaked my-signing-secret", data={"token": "t0k3n"})])
    assert kept.events[0].message == "leaked ***" and kept.events[0].data == {"token": "***"}


async def test_events_published_from_another_thread_reach_the_queue() -> None:
    sink = ScriptedSink()
    bus = EventBus([SinkSpec(sink=sink, policy=FAST)])
    bus.publish([ev(seq=1)])  # starts the worker on this loop
    thread = threading.Thread(target=bus.publish, args=([ev(seq=2)],))
    thread.start()
    thread.join()
    await asyncio.sleep(0.05)
    assert await bus.flush(1.0)
    assert sink.seqs == [1, 2]
    await bus.aclose(0.5)


def test_queued_sinks_with_one_name_keep_apart_stats() -> None:
    bus = EventBus(
        [
            WebhookSink(url="https://discord.com/api/webhooks/1/a", format="discord"),
            WebhookSink(url="https://discord.com/api/webhooks/2/b", format="discord"),
        ]
    )
    assert list(bus.stats()) == ["discord:https://discord.com", "discord:https://discord.com#2"]


def test_publishing_without_a_running_loop_drops_and_counts() -> None:
    sink = ScriptedSink()
    bus = EventBus([sink])
    bus.publish([ev()])
    assert bus.stats()["scripted"].dropped == 1


def test_something_that_is_not_a_sink_is_refused() -> None:
    with pytest.raises(TypeError, match="not a sink"):
        EventBus([object()])  # type: ignore[list-item]
