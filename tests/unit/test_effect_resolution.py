"""Settling an effect in doubt (``stageline effect RUN NODE KEY --done / --redo``), on a real
SQLite file: done keeps the given result, redo forgets it, and a run that ended keeps its
record as it is."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import InvalidTransition, UsageError
from stageline.ledger import Effect, EffectStatus, RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

SENT: list[str] = []


class S(TypedDict, total=False):
    sent: Any


async def mail(state: S, ctx: StageContext) -> dict[str, Any]:
    def send() -> str:
        SENT.append("mail")
        return "sent now"

    return {"sent": await ctx.effect("email", send)}


TEMPLATE = Template("doubtful", state=S)
TEMPLATE.add_stage("mail", mail)


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    SENT.clear()
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


async def in_doubt(runner: Runner) -> str:
    """A run whose effect began in a process that died before it recorded the result."""
    run = await runner.create(TEMPLATE, {})
    await runner.ledger.begin_effect(
        Effect(run_id=run.run_id, node="mail", key="email", attempt=1, started_at=time.time())
    )
    failed = await runner.resume(run.run_id)
    assert failed.status is RunStatus.FAILED and failed.run.failure_phase == "effect_in_doubt"
    return run.run_id


async def test_done_keeps_the_given_result_and_the_retry_does_not_run_it(runner: Runner) -> None:
    run_id = await in_doubt(runner)
    await runner.resolve_effect(run_id, "mail", "email", done=True, result={"id": 3})
    effect = await runner.ledger.get_effect(run_id, "mail", "email")
    assert effect is not None
    assert (effect.status, effect.result) == (EffectStatus.DONE, {"id": 3})
    done = await runner.retry(run_id)
    assert done.state == {"sent": {"id": 3}} and SENT == []


async def test_redo_forgets_it_and_the_retry_runs_it(runner: Runner) -> None:
    run_id = await in_doubt(runner)
    await runner.resolve_effect(run_id, "mail", "email", done=False)
    assert await runner.ledger.get_effect(run_id, "mail", "email") is None
    assert (await runner.retry(run_id)).state == {"sent": "sent now"} and SENT == ["mail"]


async def test_an_effect_the_run_never_had_is_a_usage_error(runner: Runner) -> None:
    run_id = await in_doubt(runner)
    with pytest.raises(UsageError) as raised:
        await runner.resolve_effect(run_id, "mail", "sms", done=True)
    assert str(raised.value) == f"run {run_id} has no effect 'sms' in node 'mail'"
    with pytest.raises(UsageError, match="no effect 'email' in node 'post'"):
        await runner.resolve_effect(run_id, "post", "email", done=False)


@pytest.mark.parametrize(("done", "verb"), [(True, "settled"), (False, "run again")])
async def test_a_run_that_ended_keeps_its_effect_as_recorded(
    runner: Runner, done: bool, verb: str
) -> None:
    run_id = await in_doubt(runner)
    await runner.cancel(run_id)
    with pytest.raises(InvalidTransition) as raised:
        await runner.resolve_effect(run_id, "mail", "email", done=done, result="x")
    assert str(raised.value) == (
        f"run {run_id} is cancelled, so effect 'email' of node 'mail' can no longer be "
        f"{verb}: its record stays as it is; start a new run to do it again"
    )
    effect = await runner.ledger.get_effect(run_id, "mail", "email")
    assert effect is not None and effect.status is EffectStatus.STARTED
