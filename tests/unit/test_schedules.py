"""Firing schedules, with the clock given: due times, the missed-window policy, thread
schedules, lineage, schedules of made assistants, and the checks made when a schedule is
added."""

from __future__ import annotations

import uuid

import pytest

from stageline.errors import InputError
from stageline.ledger import Assistant, RunStatus, next_due
from stageline.runner import Runner

T0 = 1_800_000_000.0  # 2027-01-15 08:00:00 UTC, a whole minute
INPUTS = {"topic": "tides"}


def test_due_times_follow_the_expression_in_its_time_zone() -> None:
    assert next_due("*/5 * * * *", None, T0) == T0 + 300
    assert next_due("*/5 * * * *", None, T0 + 1) == T0 + 300
    assert next_due("0 9 * * *", None, T0) == T0 + 3600  # 09:00 UTC
    assert next_due("0 9 * * *", "Europe/Paris", T0) == T0 + 24 * 3600  # 08:00 UTC tomorrow


async def test_a_schedule_fires_at_each_due_time_and_once_after_missed_ones(
    runner: Runner,
) -> None:
    cron = await runner.schedules.add(
        "blog_post", "*/5 * * * *", inputs=INPUTS, metadata={"team": "docs"}, now=T0
    )
    assert cron.next_run_at == T0 + 300
    assert await runner.schedules.fire_due(now=T0 + 299) == []
    [first] = await runner.schedules.fire_due(now=T0 + 300)
    assert await runner.schedules.fire_due(now=T0 + 300) == []  # that due time is spent
    run = await runner.ledger.get_run(first)
    assert run.status is RunStatus.QUEUED and run.inputs["topic"] == "tides"
    assert await runner.ledger.fired_by(first) == cron.cron_id
    meta = await runner.ledger.thread_meta(first)
    assert meta is not None and meta.metadata == {"team": "docs", "cron_id": cron.cron_id}
    [api_run] = await runner.ledger.api_runs(first)
    assert api_run.metadata["cron_id"] == cron.cron_id
    summary = await runner.status(first)
    assert summary.cron_id == cron.cron_id
    assert summary.to_dict()["lineage"]["cron_id"] == cron.cron_id

    # Down for an hour: the twelve missed due times fire once, then the schedule goes on
    # from that look (not from the first missed time).
    back = T0 + 300 + 3600 + 17
    assert len(await runner.schedules.fire_due(now=back)) == 1
    moved = await runner.ledger.cron(cron.cron_id)
    assert moved is not None and moved.next_run_at == next_due("*/5 * * * *", None, back)
    assert await runner.schedules.fire_due(now=back + 1) == []
    assert len(await runner.ledger.cron_fires(cron.cron_id)) == 2


async def test_an_ended_or_disabled_schedule_stops_firing(runner: Runner) -> None:
    ending = await runner.schedules.add(
        "blog_post", "*/5 * * * *", inputs=INPUTS, end_time=T0 + 400, now=T0
    )
    assert len(await runner.schedules.fire_due(now=T0 + 300)) == 1
    over = await runner.ledger.cron(ending.cron_id)
    assert over is not None and over.next_run_at is None  # the next, T0+600, is past its end
    assert await runner.schedules.fire_due(now=T0 + 3600) == []
    off = await runner.schedules.add("blog_post", "* * * * *", inputs=INPUTS, enabled=False, now=T0)
    assert off.next_run_at is None
    assert await runner.schedules.fire_due(now=T0 + 3600) == []


async def test_a_thread_schedule_starts_its_thread_once(runner: Runner) -> None:
    cron = await runner.schedules.add(
        "blog_post", "* * * * *", inputs=INPUTS, thread_id="nightly-1", now=T0
    )
    assert await runner.schedules.fire_due(now=T0 + 60) == ["nightly-1"]
    assert await runner.ledger.fired_by("nightly-1") == cron.cron_id
    assert await runner.schedules.fire_due(now=T0 + 120) == []  # it has run: skipped
    moved = await runner.ledger.cron(cron.cron_id)
    assert moved is not None and moved.next_run_at == T0 + 180  # and the schedule goes on


async def test_a_bad_schedule_is_refused_when_added(runner: Runner) -> None:
    with pytest.raises(InputError, match="not a cron expression"):
        await runner.schedules.add("blog_post", "every morning", inputs=INPUTS)
    with pytest.raises(InputError, match="time zone"):
        await runner.schedules.add("blog_post", "0 9 * * *", inputs=INPUTS, timezone="Nowhere")
    with pytest.raises(InputError, match="no time that comes"):
        await runner.schedules.add("blog_post", "0 0 30 2 *", inputs=INPUTS)  # 30 February
    with pytest.raises(InputError):
        await runner.schedules.add("blog_post", "0 9 * * *", inputs={"nope": 1})
    with pytest.raises(InputError, match="not a valid run id"):
        await runner.schedules.add("blog_post", "0 9 * * *", inputs=INPUTS, thread_id="../x")
    assert await runner.ledger.crons() == []


async def test_a_schedule_of_a_made_assistant_runs_its_template_as_that_assistant(
    runner: Runner,
) -> None:
    made = await runner.ledger.put_assistant(
        Assistant(assistant_id=str(uuid.uuid4()), graph_id="blog_post", name="weekly")
    )
    cron = await runner.schedules.add(
        "blog_post", "* * * * *", inputs=INPUTS, assistant_id=made.assistant_id, now=T0
    )
    assert (cron.assistant_id, cron.template) == (made.assistant_id, "blog_post")
    [fired] = await runner.schedules.fire_due(now=T0 + 60)
    assert (await runner.ledger.get_run(fired)).template == "blog_post"
    meta = await runner.ledger.thread_meta(fired)
    assert meta is not None
    assert (meta.metadata["assistant_id"], meta.metadata["graph_id"]) == (
        made.assistant_id,
        "blog_post",
    )
    [api_run] = await runner.ledger.api_runs(fired)
    assert api_run.assistant_id == made.assistant_id

    await runner.ledger.delete_assistant(made.assistant_id)  # its schedule fires no more
    assert await runner.schedules.fire_due(now=T0 + 120) == []
    assert len(await runner.ledger.cron_fires(cron.cron_id)) == 1
