"""The lease of a run that advances, on a real SQLite file: renewed while a long step runs
(through a database hiccup), and a run whose lease another process took stops after its
step and is left queued for whoever holds it now."""

from __future__ import annotations

import asyncio
import logging
import operator
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypedDict

import pytest

from stageline.config import Settings, with_overrides
from stageline.errors import StorageError
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

TTL = 0.3
"""A short lease: renewed every 0.1 s while a step runs."""
RENEWALS_SEEN = 3
"""How many renewals the long step waits for (it never waits on the clock alone)."""


class S(TypedDict, total=False):
    done: Annotated[list[str], operator.add]


class Renewals:
    """Counts the lease renewals the runner makes, optionally failing the first ones."""

    def __init__(self, runner: Runner, *, failing: int = 0) -> None:
        self.calls: list[tuple[str, str, float]] = []
        self.results: list[Any] = []
        self.failing = failing
        self.enough = asyncio.Event()
        self._renew = runner.ledger.renew_lease

    async def __call__(self, run_id: str, holder: str, ttl: float) -> Any:
        self.calls.append((run_id, holder, ttl))
        if len(self.calls) <= self.failing:
            raise StorageError("database is locked")
        result = await self._renew(run_id, holder, ttl)
        self.results.append(result)
        if len(self.results) >= RENEWALS_SEEN:
            self.enough.set()
        return result


async def long_step(state: S, ctx: StageContext) -> dict[str, Any]:
    """Runs until the lease was renewed a few times (bounded, in case it never is)."""
    await asyncio.wait_for(ctx.services["renewals"].enough.wait(), 20)
    return {"done": ["long"]}


async def stolen(state: S, ctx: StageContext) -> dict[str, Any]:
    """Another process takes the lease (this one's expired, say) while the step runs."""
    ledger = ctx.services["ledger"]
    await ledger.transition(
        ctx.run_id, RunStatus.RUNNING, lease_holder="elsewhere:1:x", lease_expires_at=4e9
    )
    await asyncio.wait_for(ctx.services["lost"].wait(), 20)
    return {"done": ["stolen"]}


async def after(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"done": ["after"]}


LONG = Template("long_lease", state=S).add_stage("long", long_step).add_stage("after", after)
LONG.add_edge("long", "after")
STOLEN = Template("stolen_lease", state=S).add_stage("stolen", stolen).add_stage("after", after)
STOLEN.add_edge("stolen", "after")


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(with_overrides(sqlite_settings, lease_ttl=TTL), deliver=False) as r:
        yield r


async def test_a_long_step_keeps_its_lease(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    renewals = Renewals(runner)
    monkeypatch.setattr(runner.ledger, "renew_lease", renewals)
    summary = await runner.start(LONG, {}, run_id="long-1", services={"renewals": renewals})
    assert summary.status is RunStatus.SUCCEEDED
    assert summary.state == {"done": ["long", "after"]}
    holders = {holder for _, holder, _ in renewals.calls}
    assert len(holders) == 1 and {(r, t) for r, _, t in renewals.calls} == {("long-1", TTL)}
    renewed = renewals.results[0]
    assert renewed is not None and renewed.lease_holder in holders
    assert summary.run.lease_holder is None  # let go at the end


async def test_a_failed_renewal_is_logged_and_the_next_one_made(
    runner: Runner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    renewals = Renewals(runner, failing=1)
    monkeypatch.setattr(runner.ledger, "renew_lease", renewals)
    with caplog.at_level(logging.WARNING, logger="stageline.runner"):
        summary = await runner.start(LONG, {}, run_id="hiccup-1", services={"renewals": renewals})
    assert summary.status is RunStatus.SUCCEEDED
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == "could not renew the lease of run hiccup-1"
    assert warning.exc_info is not None and warning.exc_info[0] is StorageError


async def test_a_run_whose_lease_was_taken_stops_after_its_step(
    runner: Runner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    lost = asyncio.Event()
    renew = runner.ledger.renew_lease

    async def renewing(run_id: str, holder: str, ttl: float) -> Any:
        found = await renew(run_id, holder, ttl)
        if found is None:
            lost.set()
        return found

    monkeypatch.setattr(runner.ledger, "renew_lease", renewing)
    with caplog.at_level(logging.ERROR, logger="stageline.runner"):
        summary = await runner.start(
            STOLEN, {}, run_id="stolen-1", services={"ledger": runner.ledger, "lost": lost}
        )
    assert summary.status is RunStatus.QUEUED  # for the process that holds it now
    assert "after" not in summary.state.get("done", [])
    drained = [e for e in await runner.ledger.events("stolen-1") if e.kind == "run.drained"]
    assert [e.message for e in drained] == ["lease lost"]
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR] == [
        "lost the lease of run stolen-1; stopping after this step"
    ]


async def test_a_drain_stops_an_advance_in_flight_after_its_step(runner: Runner) -> None:
    entered, go = asyncio.Event(), asyncio.Event()

    async def held(state: S, ctx: StageContext) -> dict[str, Any]:
        entered.set()
        await go.wait()
        return {"done": ["held"]}

    template = Template("drained", state=S).add_stage("held", held).add_stage("after", after)
    template.add_edge("held", "after")
    advance = asyncio.create_task(runner.start(template, {}, run_id="drain-1"))
    await entered.wait()
    assert runner.drain("deploy") == 1  # one advance in flight
    go.set()
    summary = await advance
    assert summary.status is RunStatus.QUEUED  # another process resumes it
    assert summary.state == {"done": ["held"]}
    drained = [e for e in await runner.ledger.events("drain-1") if e.kind == "run.drained"]
    assert [e.message for e in drained] == ["deploy"]
    assert runner.drain() == 0  # the finished advance is no longer in flight
