"""The ``telegram`` sink type as configured: what a bad table says, which events its filter
lets through (critical ones only, narrowed by ``kinds``, never widened), the message text,
and the bot token kept out of ids, names and text."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from stageline.errors import ConfigError
from stageline.events import CRITICAL_KINDS, DeliveryError, Redactor, TelegramSink, build_sinks
from stageline.events._config import SecretMissing
from stageline.events._telegram import DASHBOARD_RUNS, telegram_text
from stageline.ledger import Event

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

from fake_telegram import FakeTelegram  # noqa: E402

TOKEN = "123456789:AAHfakeTokenForTheStagelineTests_0123456"
ENV = {"TG_TOKEN": TOKEN}


def table(**changes: Any) -> dict[str, Any]:
    made: dict[str, Any] = {"type": "telegram", "chat_id": -100123, "bot_token_env": "TG_TOKEN"}
    made.update(changes)
    return {k: v for k, v in made.items() if v is not None}


def build(**changes: Any) -> Any:
    [spec] = build_sinks([table(**changes)], env=ENV)
    return spec


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"chat_id": None}, "[[sinks]] #1: chat_id is required"),
        ({"chat_id": ""}, "[[sinks]] #1: chat_id is required"),
        ({"chat_id": True}, "[[sinks]] #1: chat_id is required"),
        ({"chat_id": 1.5}, "[[sinks]] #1: chat_id must be a int or str"),
        ({"bot_token_env": None}, "[[sinks]] #1: bot_token_env is required"),
        ({"bot_token": TOKEN}, "keep the bot token out of the file: bot_token_env"),
        ({"api_url": "ftp://x"}, "[[sinks]] #1: api_url must start with http:// or https://"),
        ({"kinds": ["node.*"]}, "kinds 'node.*' matches none of the kinds this type sends"),
        ({"kinds": ["run.*", "!run.*"]}, "kinds leaves none of run.failed"),
        ({"parse_mode": "HTML"}, "[[sinks]] #1: unknown key 'parse_mode'"),
    ],
)
def test_a_bad_table_is_a_config_error_naming_the_key(changes: dict[str, Any], said: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(**changes)
    assert said in str(caught.value)
    assert TOKEN not in str(caught.value)


def test_a_token_variable_that_is_not_set_names_it_and_leaves_the_sink_out() -> None:
    with pytest.raises(SecretMissing, match=r"TG_UNSET \(from bot_token_env\) is not set"):
        build_sinks([table(bot_token_env="TG_UNSET")], env={})
    missing: list[tuple[str, str]] = []
    assert build_sinks([table(bot_token_env="TG_UNSET")], env={}, missing=missing) == []
    assert len(missing) == 1 and "TG_UNSET" in missing[0][1]


def test_a_webhook_with_format_telegram_is_pointed_at_the_type() -> None:
    with pytest.raises(ConfigError, match='type = "telegram"'):
        build_sinks([{"type": "webhook", "format": "telegram", "url": "https://x"}], env={})


def ev(kind: str, **more: Any) -> Event:
    return Event(run_id="r1", kind=kind, seq=1, **more)


PROGRESS = [
    "run.started",
    "run.succeeded",
    "run.waiting",
    "node.started",
    "node.succeeded",
    "node.failed",
    "gate.waiting",
    "gate.reminded",
    "gate.escalated",
    "question.asked",
    "stage.log",
]


def test_the_default_filter_takes_the_critical_kinds_and_no_progress() -> None:
    spec = build()
    assert [k for k in CRITICAL_KINDS if spec.filter.accepts(ev(k))] == list(CRITICAL_KINDS)
    assert [k for k in PROGRESS if spec.filter.accepts(ev(k, level="critical"))] == []


def test_kinds_narrows_the_critical_kinds_and_never_widens_them() -> None:
    runs_only = build(kinds=["run.*"]).filter
    assert [k for k in CRITICAL_KINDS if runs_only.accepts(ev(k))] == ["run.failed", "run.parked"]
    all_but = build(kinds=["!*.expired"]).filter
    assert [k for k in CRITICAL_KINDS if all_but.accepts(ev(k))] == [
        "run.failed",
        "run.parked",
        "budget.exceeded",
    ]
    mixed = build(kinds=["run.failed", "*"]).filter  # "*" picks the critical kinds, no more
    assert not mixed.accepts(ev("node.started")) and mixed.accepts(ev("gate.expired"))
    assert not build(min_level="critical").filter.accepts(ev("run.parked", level="warning"))


def test_the_sink_id_and_name_hold_no_token() -> None:
    spec = build()
    assert TOKEN not in spec.sink_id and TOKEN not in spec.sink.name
    assert spec.sink.name == "telegram:https://api.telegram.org" and TOKEN not in repr(spec.sink)
    assert TOKEN in spec.sink.secrets  # the bus masks it in events


def test_the_text_names_the_run_template_what_happened_and_the_page() -> None:
    failed = ev(
        "run.failed",
        node="build",
        message="tests failed:\n 3 of 40",
        data={"failure_phase": "stage"},
    )
    text = telegram_text(failed, template="sdlc", public_url="https://sl.example.com/")
    assert text.splitlines() == [
        "❌ Run r1 (sdlc) failed at build [stage]: tests failed: 3 of 40",
        "https://sl.example.com/ui/runs/r1",
    ]
    said = "deadline passed at gate 'signoff': parked"
    expired = ev("gate.expired", node="signoff", message=said)
    assert telegram_text(expired, template="sdlc") == (
        f"⏰ Run r1 (sdlc) deadline passed at signoff: {said}"
    )
    bare = telegram_text(ev("run.parked"))
    assert bare == "🅿️ Run r1 parked"  # no template known, no public_url: no link
    other = telegram_text(ev("gate.expiry_failed", message="m"))
    assert other == "• Run r1 gate.expiry_failed: m"
    long = telegram_text(ev("run.failed", message="x" * 600), template="t" * 5000)
    assert len(long) == 4096 and long.endswith("…")


async def test_each_critical_event_is_one_message_and_a_batch_tried_again_sends_no_twice() -> None:
    """However the events are batched: a deadline's park and the run parked are two messages;
    after a 429 the batch is tried again, and what was sent is not sent again."""
    fake = FakeTelegram(TOKEN)
    sink = TelegramSink(bot_token=TOKEN, chat_id=7, api_url=fake.url)
    expired = Event(run_id="r1", kind="gate.expired", node="signoff", seq=4)
    parked = Event(run_id="r1", kind="run.parked", node="signoff", seq=5)
    failed = Event(run_id="r2", kind="run.failed", message="boom", seq=9)
    try:
        await sink.deliver([expired])
        fake.too_many = 1
        with pytest.raises(DeliveryError, match="HTTP 429"):
            await sink.deliver([expired, parked, failed])  # the first was sent: not again
        await sink.deliver([expired, parked, failed])  # the delivery's next try
        assert fake.texts() == [
            "⏰ Run r1 deadline passed at signoff",
            "🅿️ Run r1 parked at signoff",
            "❌ Run r2 failed: boom",
        ]
        await sink.deliver([expired, parked])
        assert len(fake.sent) == 3
    finally:
        await sink.aclose()
        fake.close()


def test_the_run_link_is_the_dashboard_run_page() -> None:
    from stageline.server.ui import runs
    from stageline.server.ui._web import PREFIX

    paths = {getattr(r, "path", "") for r in runs.router.routes}
    assert f"{PREFIX}/runs/" == DASHBOARD_RUNS and "/runs/{run_id}" in paths


def test_telegram_urls_and_tokens_are_masked_in_free_text() -> None:
    said = Redactor().text(
        f"POST https://api.telegram.org/bot{TOKEN}/sendMessage failed; token was {TOKEN}"
    )
    assert TOKEN not in said and TOKEN.split(":")[1] not in said
    assert "https://api.telegram.org/bot***/sendMessage" in said


async def test_a_sink_given_progress_in_code_sends_nothing() -> None:
    fake = FakeTelegram(TOKEN)
    sink = TelegramSink(bot_token=TOKEN, chat_id=7, api_url=fake.url)
    try:
        await sink.deliver([ev(k) for k in PROGRESS])
        assert fake.requests == []
        await sink.deliver([ev("run.failed", message="boom"), ev("node.failed")])
        assert fake.texts() == ["❌ Run r1 failed: boom"]
        assert fake.sent[0]["chat_id"] == 7
        assert fake.sent[0]["link_preview_options"] == {"is_disabled": True}
    finally:
        await sink.aclose()
        fake.close()
