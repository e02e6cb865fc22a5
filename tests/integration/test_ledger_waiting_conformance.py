"""``waiting_on`` (what ``stageline pending`` lists) on every backend: pending rounds of runs
that wait, each with its run's template, in one query however many runs wait."""

from __future__ import annotations

import uuid

import pytest

from stageline.ledger import Backend, LedgerStore, Run, RunStatus, Wait, WaitKind
from stageline.ledger._sql import SqlLedger


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def _run(ledger: LedgerStore, status: RunStatus, template: str) -> str:
    run_id = f"w-{uuid.uuid4().hex[:10]}"
    await ledger.create_run(
        Run(run_id=run_id, template=template, template_version="1+abc", status=status)
    )
    return run_id


def _gate(run_id: str, requested_at: float) -> Wait:
    return Wait(
        run_id=run_id,
        wait_id="g-1",
        kind=WaitKind.GATE,
        name="approval",
        node="approval",
        attempt=1,
        interrupt_id="i1",
        requested_at=requested_at,
    )


async def test_pending_rounds_of_waiting_runs_come_with_their_template(
    ledger: LedgerStore,
) -> None:
    tag = uuid.uuid4().hex[:6]
    first = await _run(ledger, RunStatus.WAITING, f"alpha-{tag}")
    second = await _run(ledger, RunStatus.WAITING, f"beta-{tag}")
    running = await _run(ledger, RunStatus.RUNNING, f"gamma-{tag}")  # resumed: not listed
    for number, run_id in enumerate((second, first, running)):
        await ledger.open_waits(run_id, [_gate(run_id, 1000.0 + number)])
    mine = {first, second, running}

    listed = [(w.run_id, t) for w, t in await ledger.waiting_on() if w.run_id in mine]
    assert listed == [(second, f"beta-{tag}"), (first, f"alpha-{tag}")]  # oldest first
    [(wait, template)] = await ledger.waiting_on(run_id=first)
    assert (wait.name, wait.kind, template) == ("approval", WaitKind.GATE, f"alpha-{tag}")
    assert await ledger.waiting_on(run_id=running) == []


async def test_listing_many_waiting_runs_is_one_query(backend: Backend) -> None:
    ledger = backend.ledger
    for number in range(12):
        run_id = await _run(ledger, RunStatus.WAITING, "many")
        await ledger.open_waits(run_id, [_gate(run_id, 2000.0 + number)])
    assert isinstance(ledger, SqlLedger)  # every backend, memory:// too
    executor = type(ledger._x)  # every executor of the backend (Postgres reads take their own)
    calls = []
    real = executor.fetch

    async def counting(self: object, sql: str, params: object) -> object:
        calls.append(sql)
        return await real(self, sql, params)  # type: ignore[arg-type]

    executor.fetch = counting  # type: ignore[method-assign]
    try:
        found = [w for w, t in await ledger.waiting_on() if t == "many"]
    finally:
        executor.fetch = real  # type: ignore[method-assign]
    assert len(found) == 12 and len(calls) == 1
