"""Sinks delivered from the ledger (the outbox), against real HTTP endpoints on 127.0.0.1 that
fail, hang and recover, on a SQLite file and on Postgres: nothing is lost when a process
exits, nothing an endpoint acknowledged is sent to it again, and two deliverers at once never
send one batch twice."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.events import Deliverer, build_sinks
from stageline.ledger import Backend, Event, LedgerStore, Run, RunStatus, open_backend

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))

from loopback_hook import Endpoint  # noqa: E402


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    made = Endpoint()
    yield made
    made.close()


def sink_table(endpoint: Endpoint, **options: Any) -> dict[str, Any]:
    return {
        "type": "webhook",
        "format": "json",
        "url": endpoint.url,
        "name": "hook",
        "min_level": "debug",
        "timeout": 0.5,
        "backoff": 0.02,
        **options,
    }


def deliverer(ledger: LedgerStore, endpoint: Endpoint, **options: Any) -> Deliverer:
    return Deliverer(
        ledger, build_sinks([sink_table(endpoint, **options)], which="outbox"), poll=0.05
    )


async def write_run(ledger: LedgerStore, events: int, run_id: str | None = None) -> str:
    run_id = run_id or f"o-{time.time_ns() % 10**12}"
    await ledger.create_run(
        Run(run_id=run_id, template="t", template_version="1+x", status=RunStatus.RUNNING)
    )
    await ledger.append_events(
        run_id, [Event(run_id=run_id, kind=f"step.{i}") for i in range(events)]
    )
    return run_id


async def deliver_until(d: Deliverer, done: Any) -> None:
    """Passes until ``done()`` holds (pytest-timeout guards against a hang)."""
    while not done():
        await d.deliver_due()
        await asyncio.sleep(0.02)


def expected(run_id: str, n: int) -> list[tuple[str, int]]:
    return [(run_id, seq) for seq in range(1, n + 1)]


@pytest.fixture
async def other(shared_backend_url: str) -> Any:
    """A second connection to the same database: another process, as far as the ledger is
    concerned."""
    opened = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        yield opened
    finally:
        await opened.aclose()


@pytest.fixture
async def shared(shared_backend_url: str) -> Any:
    opened = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        yield opened
    finally:
        await opened.aclose()


async def test_a_failing_endpoint_gets_every_event_once_it_recovers(
    shared: Backend,
    endpoint: Endpoint,
) -> None:
    endpoint.mode = "fail"
    d = deliverer(shared.ledger, endpoint, batch=7)
    await d.register()
    run_id = await write_run(shared.ledger, 30)
    await deliver_until(d, lambda: d.failures >= 3)
    assert endpoint.acked == [] and d.stats()["hook"].dropped == 0
    first_tries = [seq for _, seq in endpoint.tried]
    assert first_tries[:7] == list(range(1, 8))  # the first batch, retried as it was
    assert set(first_tries) == set(range(1, 8))

    endpoint.mode = "ok"
    await deliver_until(d, lambda: len(endpoint.acked) >= 30)
    assert endpoint.acked == expected(run_id, 30)  # in order, each once
    assert await shared.ledger.sink_cursor("hook", run_id) == 30
    await d.stop(0.5)


async def test_a_process_that_exits_leaves_the_rest_to_the_next_one(
    shared_backend_url: str,
    endpoint: Endpoint,
) -> None:
    endpoint.mode = "hang"
    first = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        d = deliverer(first.ledger, endpoint)
        await d.start()
        run_id = await write_run(first.ledger, 12)
        d.emit(Event(run_id=run_id, kind="x"))
        while not endpoint.tried:  # or pytest-timeout
            await asyncio.sleep(0.02)
        await d.stop(0.2)  # the endpoint still has not answered: the process goes anyway
        assert not endpoint.release.is_set() and endpoint.acked == []
    finally:
        await first.aclose()

    endpoint.mode = "ok"
    second = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        later = deliverer(second.ledger, endpoint)
        await deliver_until(later, lambda: len(endpoint.acked) >= 12)
        await later.stop(0.5)
        assert await second.ledger.sink_cursor("hook", run_id) == 12
    finally:
        await second.aclose()
    assert endpoint.acked == expected(run_id, 12)


async def test_two_deliverers_at_once_never_send_one_batch_twice(
    shared: Backend,
    other: Backend,
    endpoint: Endpoint,
) -> None:
    one = deliverer(shared.ledger, endpoint, batch=3)
    two = deliverer(other.ledger, endpoint, batch=3)
    await one.register()
    await two.register()
    runs = [await write_run(shared.ledger, 20, run_id=f"two-{i}") for i in range(6)]

    async def both() -> None:
        for _ in range(200):
            if len(endpoint.acked) >= 6 * 20:
                return
            await asyncio.gather(one.deliver_due(), two.deliver_due())

    await both()
    counts = Counter(endpoint.acked)
    assert sorted(counts) == sorted(p for r in runs for p in expected(r, 20))
    assert set(counts.values()) == {1}, [p for p, c in counts.items() if c > 1]
    for run_id in runs:  # in order within each run
        assert [s for r, s in endpoint.acked if r == run_id] == list(range(1, 21))
    assert one.stats()["hook"].delivered + two.stats()["hook"].delivered == 120


async def test_a_refused_batch_is_given_up_and_counted(
    shared: Backend,
    endpoint: Endpoint,
    caplog: pytest.LogCaptureFixture,
) -> None:
    endpoint.mode = "refuse"
    d = deliverer(shared.ledger, endpoint, batch=5)
    await d.register()
    run_id = await write_run(shared.ledger, 5)
    await deliver_until(d, lambda: d.stats()["hook"].dropped == 5)
    assert await shared.ledger.sink_cursor("hook", run_id) == 5
    assert any("gave up 5 event(s)" in r.getMessage() for r in caplog.records)
    assert endpoint.url not in caplog.text


async def test_a_new_sink_starts_at_its_registration_and_skips_what_it_filters(
    shared: Backend,
    endpoint: Endpoint,
) -> None:
    before = await write_run(shared.ledger, 4)
    d = deliverer(shared.ledger, endpoint, kinds=["step.1", "step.3"])
    await d.register()
    await shared.ledger.append_events(before, [Event(run_id=before, kind="step.1")])
    after = await write_run(shared.ledger, 4)
    await deliver_until(d, lambda: (after, 4) in endpoint.acked)
    await d.deliver_due()
    assert sorted(endpoint.acked) == sorted([(before, 5), (after, 2), (after, 4)])
    assert await shared.ledger.sink_cursor("hook", after) == 4  # past what it filtered out


async def test_the_memory_ledger_keeps_the_same_outbox(endpoint: Endpoint) -> None:
    opened = await open_backend("memory://", checkpoint_serde())
    try:
        endpoint.mode = "fail"
        d = deliverer(opened.ledger, endpoint, batch=4)
        await d.register()
        run_id = await write_run(opened.ledger, 10)
        await deliver_until(d, lambda: d.failures >= 2)
        endpoint.mode = "ok"
        await deliver_until(d, lambda: len(endpoint.acked) >= 10)
        assert endpoint.acked == expected(run_id, 10)
        assert [s for _, s in endpoint.tried[:4]] == [1, 2, 3, 4]
    finally:
        await opened.aclose()
