"""Which ``[[sinks]]`` are built where: inline ones by every process, outbox ones only by a
process that delivers, each under a stable id; a missing secret leaves one sink out."""

from __future__ import annotations

import pytest

from stageline.errors import ConfigError
from stageline.events import Deliverer, build_sinks
from stageline.events._config import sink_id
from stageline.ledger import MemoryLedger

HOOK = {"type": "webhook", "format": "discord", "url_env": "HOOK_URL"}
CONSOLE = {"type": "console"}


def test_inline_and_outbox_sinks_are_built_apart() -> None:
    env = {"HOOK_URL": "https://discord.com/api/webhooks/1/abc"}
    inline = build_sinks([HOOK, CONSOLE], env=env, which="inline")
    outbox = build_sinks([HOOK, CONSOLE], env=env, which="outbox")
    assert [type(s.sink).__name__ for s in inline] == ["ConsoleSink"]
    assert [type(s.sink).__name__ for s in outbox] == ["WebhookSink"]
    assert outbox[0].sink_id == sink_id(HOOK)


def test_an_inline_build_needs_no_outbox_secret() -> None:
    assert len(build_sinks([HOOK, CONSOLE], env={}, which="inline")) == 1
    with pytest.raises(ConfigError, match="HOOK_URL"):
        build_sinks([HOOK], env={}, which="outbox")


def test_a_sink_id_is_stable_and_ignores_filters_and_retry_settings() -> None:
    assert sink_id(HOOK) == sink_id(
        {**HOOK, "min_level": "error", "retries": 9, "kinds": ["run.*"]}
    )
    assert sink_id(HOOK) != sink_id({**HOOK, "url_env": "OTHER_URL"})
    assert sink_id({**HOOK, "name": "alerts"}) == "alerts"
    assert "abc" not in sink_id({"type": "webhook", "url": "https://h/api/webhooks/1/abc"})


def test_a_deliverer_leaves_out_a_sink_without_its_secret(
    caplog: pytest.LogCaptureFixture,
) -> None:
    named = {**HOOK, "name": "team"}
    made = Deliverer.configured([named, CONSOLE], MemoryLedger(), env={})
    assert made.sink_ids == []
    assert "HOOK_URL" in made.unavailable["team"]
    assert any(
        "team" in r.getMessage() and "wait in the ledger" in r.getMessage() for r in caplog.records
    )
