"""The critical channel: a ``type = "telegram"`` sink delivered from the ledger (the outbox) to a
fake Bot API on 127.0.0.1, with real runs on a SQLite file and on Postgres. A run that fails,
one that parks, one stopped at its budget and a deadline's last step each send one message;
progress sends none; Telegram's 429 is waited out and the message sent once; the bot token is
in no log line, event or outbox row."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

from stageline.config import Settings, with_overrides
from stageline.events import Deliverer, build_sinks
from stageline.ledger import Event, Run, RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.templates._park import add_park

TESTS = Path(__file__).resolve().parents[1]
for folder in (TESTS, TESTS / "fixtures"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from fake_telegram import FakeTelegram  # noqa: E402

from raw_sql import raw_sql  # noqa: E402

TOKEN = "123456789:AAHfakeTokenForTheStagelineTests_0123456"
PUBLIC = "https://stageline.example.com"


class S(TypedDict, total=False):
    n: int


async def step(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


async def spend(state: S, ctx: StageContext) -> dict[str, Any]:
    ctx.metric("output_tokens", 100)
    return {"n": state.get("n", 0) + 1}


async def boom(state: S, ctx: StageContext) -> dict[str, Any]:
    raise RuntimeError("the build broke")


def plain() -> Template:
    made = Template("tg_plain", state=S).add_stage("a", step).add_stage("b", step)
    return made.add_sequence("a", "b")


def failing() -> Template:
    return (
        Template("tg_failing", state=S)
        .add_stage("a", step)
        .add_stage("b", boom)
        .add_sequence("a", "b")
    )


def parking() -> Template:
    made = Template("tg_parking", state=S).add_stage("work", step)
    made.add_route("work", lambda s: "again", {"again": "work"})
    made.add_loop("rounds", head="work", max_iterations=2, on_exhausted="more")
    return add_park(made, "more", loop="rounds", head="work", rounds=1)


def budgeted() -> Template:
    made = Template("tg_budget", state=S, budget={"tokens": 150})
    made.add_stage("a", spend).add_stage("b", spend).add_stage("c", spend)
    return made.add_sequence("a", "b", "c")


def deadlined() -> Template:
    made = Template("tg_deadline", state=S).add_stage("prepare", step)
    made.add_gate("signoff", deadline="1h", on_deadline=["remind", "escalate", "park"])
    return made.add_stage("finish", step).add_sequence("prepare", "signoff", "finish")


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTelegram]:
    monkeypatch.setenv("STAGELINE_TEST_TELEGRAM_TOKEN", TOKEN)
    made = FakeTelegram(TOKEN)
    yield made
    made.close()


def table(fake: FakeTelegram, **more: Any) -> dict[str, Any]:
    return {
        "type": "telegram",
        "name": "tg",
        "chat_id": -1001234,
        "bot_token_env": "STAGELINE_TEST_TELEGRAM_TOKEN",
        "api_url": fake.url,
        "backoff": 0.05,
        **more,
    }


@pytest.fixture
def settings(
    shared_backend_url: str, settings_for: Callable[[str], Settings], fake: FakeTelegram
) -> Settings:
    return with_overrides(
        settings_for(shared_backend_url),
        sinks=(table(fake),),
        public_url=PUBLIC,
        sink_exit_timeout=10.0,
    )


async def until(check: Callable[[], Any], what: str) -> None:
    while not check():  # pytest-timeout guards against a hang
        await asyncio.sleep(0.05)


async def test_each_critical_event_sends_one_message_and_progress_none(
    settings: Settings, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with Runner.open(settings) as runner:
        ok = await runner.start(plain(), {}, run_id="tg-ok")
        assert ok.status is RunStatus.SUCCEEDED
        failed = await runner.start(failing(), {}, run_id="tg-failed")
        assert failed.status is RunStatus.FAILED
        parked = await runner.start(parking(), {}, run_id="tg-parked")
        assert parked.status is RunStatus.PARKED
        budget = await runner.start(budgeted(), {}, run_id="tg-budget")
        assert budget.status is RunStatus.WAITING and budget.waits[0].name == "budget"
        waiting = await runner.start(deadlined(), {}, run_id="tg-deadline")
        assert waiting.status is RunStatus.WAITING
        await until(lambda: len(fake.sent) >= 3, "three messages")
        # Two hours on: the 1 h deadline's steps are all due, the 24 h ones of others are not.
        swept = await runner.sweep(now=time.time() + 2 * 3600)
        assert [s["step"] for s in swept] == [
            "remind",
            "escalate",
            "park",
        ]
        await until(lambda: len(fake.sent) >= 5, "five messages")
        ledger = runner.ledger
        run_ids = ("tg-ok", "tg-failed", "tg-parked", "tg-budget", "tg-deadline")
        every = {r: await ledger.events(r) for r in run_ids}
        # Every event was looked at (the cursor is at each run's last): none is still due.
        for run_id, events in every.items():
            await until(
                lambda r=run_id, e=events: _cursor(settings, r) == e[-1].seq, f"cursor {run_id}"
            )

    # One message per critical event, in the order each run had them.
    by_run = {r: [t for t in fake.texts() if f"Run {r} " in t] for r in run_ids}
    assert sum(map(len, by_run.values())) == len(fake.texts()) == 5, fake.texts()
    assert by_run["tg-ok"] == []
    [failed_text] = by_run["tg-failed"]
    assert failed_text.splitlines() == [
        "❌ Run tg-failed (tg_failing) failed at b [stage]: RuntimeError: the build broke",
        f"{PUBLIC}/ui/runs/tg-failed",
    ]
    [parked_text] = by_run["tg-parked"]
    assert parked_text.startswith("🅿️ Run tg-parked (tg_parking) parked: out of rounds")
    [budget_text] = by_run["tg-budget"]
    assert budget_text.startswith("💸 Run tg-budget (tg_budget) stopped at its budget at c: ")
    assert "used 200 of its 150 tokens" in budget_text
    expired_text, parked_too = by_run["tg-deadline"]
    assert expired_text.splitlines() == [
        "⏰ Run tg-deadline (tg_deadline) deadline passed at signoff: "
        + _message(every["tg-deadline"], "gate.expired"),
        f"{PUBLIC}/ui/runs/tg-deadline",
    ]
    assert parked_too.splitlines() == [
        "🅿️ Run tg-deadline (tg_deadline) parked at signoff: "
        + _message(every["tg-deadline"], "run.parked"),
        f"{PUBLIC}/ui/runs/tg-deadline",
    ]
    assert all(b["chat_id"] == -1001234 for b in fake.sent)
    assert all(t.endswith(f"{PUBLIC}/ui/runs/{r}") for r in run_ids for t in by_run[r])
    # Progress (node.*, run.started, gate.waiting, reminders...) was there, and never sent.
    kinds = {e.kind for events in every.values() for e in events}
    assert {"node.started", "node.succeeded", "gate.waiting", "gate.reminded"} <= kinds

    # The token: in no log line, event or outbox row (it is only in the request path).
    assert all(path == f"/bot{TOKEN}/sendMessage" for _, path, _ in fake.requests)
    assert TOKEN not in caplog.text and TOKEN.split(":")[1] not in caplog.text
    assert f"{fake.url}/bot***/sendMessage" in caplog.text  # httpx's own line, masked
    for events in every.values():
        assert all(TOKEN not in repr(e) for e in events)
    url = settings.database_url
    for name in ("stageline_sinks", "stageline_sink_cursors", "stageline_events"):
        rows = raw_sql(url, f"SELECT * FROM {name}")
        assert rows and TOKEN.split(":")[1] not in repr(rows), name


def _message(events: list[Event], kind: str) -> str:
    [event] = [e for e in events if e.kind == kind]
    return event.message


def _cursor(settings: Settings, run_id: str) -> int:
    rows = raw_sql(
        settings.database_url,
        "SELECT seq FROM stageline_sink_cursors WHERE sink_id = ? AND run_id = ?",
        "tg",
        run_id,
    )
    return int(rows[0][0]) if rows else 0


async def test_a_429_is_waited_out_and_the_message_sent_once(
    settings: Settings, fake: FakeTelegram, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    fake.too_many, fake.retry_after = 1, 1
    async with Runner.open(settings) as runner:
        failed = await runner.start(failing(), {}, run_id="tg-429")
        assert failed.status is RunStatus.FAILED
        await until(lambda: fake.sent, "the message")
        events = await runner.ledger.events("tg-429")
        await until(lambda: _cursor(settings, "tg-429") == events[-1].seq, "the cursor")
    tries = [t for t, path, _ in fake.requests if path.endswith("/sendMessage")]
    assert len(tries) == 2 and len(fake.sent) == 1
    assert tries[1] - tries[0] >= 0.9  # it waited what Telegram asked (1 s), not its backoff
    assert fake.texts()[0].startswith("❌ Run tg-429 (tg_failing) failed")
    assert "HTTP 429: Too Many Requests: retry after 1" in caplog.text
    assert TOKEN not in caplog.text


async def test_a_refused_message_is_given_up_and_logged_without_the_token(
    shared_backend_url: str,
    settings_for: Callable[[str], Settings],
    fake: FakeTelegram,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A wrong token (Telegram answers 401) is refused for good: logged, counted, the cursor
    moved on; neither the wrong token nor the right one is in the log."""
    wrong = "987654321:AAHwrongTokenForTheStagelineTests_98765"
    monkeypatch.setenv("STAGELINE_TEST_TELEGRAM_TOKEN", wrong)
    caplog.set_level(logging.DEBUG)
    settings = settings_for(shared_backend_url)
    async with Runner.open(settings, deliver=False) as runner:
        await runner.ledger.create_run(
            Run(run_id="tg-401", template="t", template_version="1", status=RunStatus.RUNNING)
        )
        d = Deliverer(runner.ledger, build_sinks([table(fake)], which="outbox"), poll=0.05)
        await d.register()
        await runner.ledger.append_events(
            "tg-401",
            [Event(run_id="tg-401", kind="run.failed", level="critical", message="x")],
        )
        while d.stats()["tg"].dropped < 1:
            await d.deliver_due()
            await asyncio.sleep(0.02)
        await d.stop(0.5)
    assert fake.sent == [] and len(fake.requests) == 1
    assert "gave up 1 event(s) of run tg-401" in caplog.text
    assert "HTTP 401: Unauthorized" in caplog.text
    assert wrong not in caplog.text and wrong.split(":")[1] not in caplog.text
