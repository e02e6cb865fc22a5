"""One conformance suite for every ledger backend (``BACKEND_URLS`` in conftest), double included.

Each test uses fresh run ids and template names, so a shared database (Postgres) works too.
"""

from __future__ import annotations

import asyncio
import socket
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateTable

from stageline.checkpoints import checkpoint_serde
from stageline.errors import InvalidTransition, LeaseHeld, RunNotFound
from stageline.ledger import (
    Backend,
    Event,
    EventCategory,
    LedgerStore,
    NodeRecord,
    NodeStatus,
    Run,
    RunStatus,
    _sql_staging,
    open_backend,
)
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._schema import schema_version
from stageline.runner import Runner
from stageline.templates import Template

DEAD_HOLDER = f"{socket.gethostname()}:999999:abc"


def uid(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_run(template: str = "tpl", *, status: RunStatus = RunStatus.QUEUED, **kw: Any) -> Run:
    return Run(run_id=uid(), template=template, template_version="1+abc", status=status, **kw)


def ev(run_id: str, kind: str, **kw: Any) -> Event:
    return Event(run_id=run_id, kind=kind, **kw)


def node(
    run_id: str,
    *,
    task_id: str = "t1",
    attempt: int = 1,
    try_no: int = 1,
    status: NodeStatus = NodeStatus.RUNNING,
    started_at: float = 1000.0,
    name: str = "n",
    **kw: Any,
) -> NodeRecord:
    return NodeRecord(
        run_id=run_id,
        task_id=task_id,
        attempt=attempt,
        try_no=try_no,
        node=name,
        stage=f"mod:{name}",
        status=status,
        started_at=started_at,
        **kw,
    )


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


# -- runs -------------------------------------------------------------------------------------


async def test_create_and_get_run_round_trips_every_field(ledger: LedgerStore) -> None:
    run = make_run(inputs={"topic": "x", "n": [1, 2]}, created_at=1234.5, updated_at=1234.5)
    assert await ledger.create_run(run) == run
    got = await ledger.get_run(run.run_id)
    assert got == run
    assert got.status is RunStatus.QUEUED
    assert got.inputs == {"topic": "x", "n": [1, 2]}
    assert got.cancel_requested is False


async def test_create_run_writes_its_events(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run, events=[ev(run.run_id, "run.queued")])
    assert [(e.seq, e.kind) for e in await ledger.events(run.run_id)] == [(1, "run.queued")]
    assert (await ledger.get_run(run.run_id)).last_seq == 1


async def test_creating_a_run_twice_is_refused(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    with pytest.raises(InvalidTransition, match=run.run_id):
        await ledger.create_run(run)


async def test_unknown_run_raises_run_not_found(ledger: LedgerStore) -> None:
    with pytest.raises(RunNotFound, match="no-such-run"):
        await ledger.get_run("no-such-run")
    with pytest.raises(RunNotFound):
        await ledger.transition("no-such-run", RunStatus.RUNNING)
    with pytest.raises(RunNotFound):
        await ledger.request_cancel("no-such-run")
    with pytest.raises(RunNotFound):
        await ledger.append_events("no-such-run", [ev("no-such-run", "x")])
    with pytest.raises(RunNotFound):
        await ledger.acquire_lease("no-such-run", "me", 10)


async def test_list_runs_filters_by_status_and_template_newest_first(ledger: LedgerStore) -> None:
    a, b = uid("tpl-a"), uid("tpl-b")
    old = make_run(a, created_at=100.0)
    mid = make_run(b, created_at=200.0, status=RunStatus.FAILED)
    new = make_run(a, created_at=300.0, status=RunStatus.FAILED)
    for r in (mid, new, old):
        await ledger.create_run(r)

    assert [r.run_id for r in await ledger.list_runs(template=a)] == [new.run_id, old.run_id]
    assert [r.run_id for r in await ledger.list_runs(template=a, status="failed")] == [new.run_id]
    assert [r.run_id for r in await ledger.list_runs(template=b, status=RunStatus.QUEUED)] == []
    assert [r.run_id for r in await ledger.list_runs(template=a, limit=1)] == [new.run_id]
    mine = {old.run_id, mid.run_id, new.run_id}
    everything = [r.run_id for r in await ledger.list_runs() if r.run_id in mine]
    assert everything == [new.run_id, mid.run_id, old.run_id]
    failed = [r.run_id for r in await ledger.list_runs(status="failed") if r.run_id in mine]
    assert failed == [new.run_id, mid.run_id]


async def test_transition_sets_status_and_fields(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    done = await ledger.transition(
        run.run_id,
        RunStatus.FAILED,
        error="boom",
        failure_phase="stage",
        failed_node="n",
        attempt=2,
        finished_at=99.0,
    )
    assert done.status is RunStatus.FAILED
    assert (done.error, done.failure_phase, done.failed_node, done.attempt, done.finished_at) == (
        "boom",
        "stage",
        "n",
        2,
        99.0,
    )
    assert done.updated_at >= run.updated_at
    assert await ledger.get_run(run.run_id) == done


async def test_transition_returns_the_run_with_the_seq_of_its_last_event(
    ledger: LedgerStore,
) -> None:
    """A run this ledger holds no lease of: its events are numbered after the UPDATE, and the
    run handed back says so (``last_seq`` is where a follower of its events goes on from)."""
    run = make_run()
    await ledger.create_run(run)
    await ledger.append_events(run.run_id, [Event(run_id=run.run_id, kind="run.note")])
    done = await ledger.transition(
        run.run_id,
        RunStatus.FAILED,
        events=[
            Event(run_id=run.run_id, kind="run.note"),
            Event(run_id=run.run_id, kind="run.failed"),
        ],
    )
    seqs = [e.seq for e in await ledger.events(run.run_id)]
    assert seqs == [1, 2, 3]
    assert done.last_seq == 3
    assert (await ledger.get_run(run.run_id)).last_seq == 3


async def test_transition_with_expect_refuses_a_status_that_does_not_match(
    ledger: LedgerStore,
) -> None:
    run = make_run()
    await ledger.create_run(run)
    ok = await ledger.transition(run.run_id, RunStatus.RUNNING, expect=[RunStatus.QUEUED])
    assert ok.status is RunStatus.RUNNING
    with pytest.raises(InvalidTransition, match="running"):
        await ledger.transition(
            run.run_id,
            RunStatus.CANCELLED,
            expect=[RunStatus.QUEUED],
            events=[ev(run.run_id, "run.cancelled")],
        )
    after = await ledger.get_run(run.run_id)
    assert after.status is RunStatus.RUNNING
    assert await ledger.events(run.run_id) == []  # the refused transition wrote nothing


async def test_request_cancel_sets_cancel_requested(ledger: LedgerStore) -> None:
    run = make_run(status=RunStatus.RUNNING)
    await ledger.create_run(run)
    flagged = await ledger.request_cancel(run.run_id)
    assert flagged.cancel_requested is True
    assert flagged.status is RunStatus.RUNNING
    assert (await ledger.get_run(run.run_id)).cancel_requested is True
    cleared = await ledger.transition(run.run_id, RunStatus.RUNNING, cancel_requested=False)
    assert cleared.cancel_requested is False


@pytest.mark.parametrize("ended", [RunStatus.SUCCEEDED, RunStatus.CANCELLED, RunStatus.REJECTED])
async def test_a_cancel_for_a_run_that_ended_is_refused_not_dropped(
    ledger: LedgerStore, ended: RunStatus
) -> None:
    run = make_run(status=ended)
    await ledger.create_run(run)
    with pytest.raises(InvalidTransition, match=f"^run {run.run_id} already {ended}$"):
        await ledger.request_cancel(run.run_id)
    assert (await ledger.get_run(run.run_id)).cancel_requested is False
    assert await ledger.cancel_requested(run.run_id) is False


async def test_a_cancel_requested_first_wins_over_the_ending(ledger: LedgerStore) -> None:
    run = make_run(status=RunStatus.RUNNING, lease_holder="me", lease_expires_at=time.time() + 60)
    await ledger.create_run(run)
    assert await ledger.cancel_requested(run.run_id) is False
    await ledger.request_cancel(run.run_id)
    assert await ledger.cancel_requested(run.run_id) is True
    ended = await ledger.transition(
        run.run_id,
        RunStatus.SUCCEEDED,
        release=True,
        expect=[RunStatus.RUNNING],
        events=[ev(run.run_id, "run.succeeded")],
        cancel_wins=[ev(run.run_id, "run.cancelled")],
    )
    assert ended.status is RunStatus.CANCELLED and ended.finished_at is not None
    assert ended.lease_holder is None
    assert [e.kind for e in await ledger.events(run.run_id)] == ["run.cancelled"]
    other = make_run(status=RunStatus.RUNNING)  # no cancel: it ends as asked
    await ledger.create_run(other)
    done = await ledger.transition(
        other.run_id,
        RunStatus.SUCCEEDED,
        events=[ev(other.run_id, "run.succeeded")],
        cancel_wins=[ev(other.run_id, "run.cancelled")],
    )
    assert done.status is RunStatus.SUCCEEDED
    assert [e.kind for e in await ledger.events(other.run_id)] == ["run.succeeded"]


async def test_delete_run_removes_run_records_and_events(ledger: LedgerStore) -> None:
    run, other = make_run(), make_run()
    for r in (run, other):
        await ledger.create_run(r, events=[ev(r.run_id, "run.queued")])
        ledger.stage_node(node(r.run_id))
    await ledger.flush()
    await ledger.delete_run(run.run_id)
    with pytest.raises(RunNotFound):
        await ledger.get_run(run.run_id)
    assert await ledger.events(run.run_id) == []
    assert await ledger.node_records(run.run_id) == []
    assert len(await ledger.events(other.run_id)) == 1
    assert len(await ledger.node_records(other.run_id)) == 1


# -- events -----------------------------------------------------------------------------------


async def test_event_sequence_numbers_have_no_gaps_across_every_write_path(
    ledger: LedgerStore,
) -> None:
    run = make_run()
    await ledger.create_run(run, events=[ev(run.run_id, "run.queued")])
    written = await ledger.append_events(run.run_id, [ev(run.run_id, "a"), ev(run.run_id, "b")])
    assert [e.seq for e in written] == [2, 3]
    ledger.stage_event(ev(run.run_id, "c"))
    ledger.stage_event(ev(run.run_id, "d"))
    await ledger.flush()
    await ledger.transition(run.run_id, RunStatus.RUNNING, events=[ev(run.run_id, "e")])
    await ledger.append_events(run.run_id, [ev(run.run_id, "f")])
    ledger.stage_event(ev(run.run_id, "g"))
    await ledger.transition(run.run_id, RunStatus.SUCCEEDED, events=[ev(run.run_id, "h")])

    got = await ledger.events(run.run_id)
    assert [e.seq for e in got] == list(range(1, 10))
    assert [e.kind for e in got] == ["run.queued", "a", "b", "c", "d", "e", "f", "g", "h"]
    assert (await ledger.get_run(run.run_id)).last_seq == 9


async def test_events_of_two_runs_are_numbered_separately(ledger: LedgerStore) -> None:
    one, two = make_run(), make_run()
    await ledger.create_run(one)
    await ledger.create_run(two)
    await ledger.append_events(one.run_id, [ev(one.run_id, "x")] * 3)
    ledger.stage_event(ev(two.run_id, "y"))
    ledger.stage_event(ev(one.run_id, "x"))
    await ledger.flush()
    assert [e.seq for e in await ledger.events(one.run_id)] == [1, 2, 3, 4]
    assert [(e.seq, e.kind) for e in await ledger.events(two.run_id)] == [(1, "y")]


async def test_events_round_trip_and_filter_by_category_and_after(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    await ledger.append_events(
        run.run_id,
        [
            ev(run.run_id, "node.started", node="a", ts=10.0),
            ev(
                run.run_id,
                "stage.log",
                category=EventCategory.LOG,
                message="hello",
                data={"k": [1, "v"]},
                node="a",
                level="debug",
            ),
            ev(run.run_id, "node.failed", category=EventCategory.ERROR, level="error"),
            ev(run.run_id, "stage.log", category=EventCategory.LOG, message="again"),
        ],
    )
    logged = await ledger.events(run.run_id, categories=["log"])
    assert [(e.seq, e.message) for e in logged] == [(2, "hello"), (4, "again")]
    assert logged[0].data == {"k": [1, "v"]}
    assert logged[0].category is EventCategory.LOG
    assert (logged[0].node, logged[0].level) == ("a", "debug")
    assert [e.seq for e in await ledger.events(run.run_id, after=2)] == [3, 4]
    mixed = await ledger.events(
        run.run_id, after=1, categories=[EventCategory.LIFECYCLE, EventCategory.ERROR]
    )
    assert [e.kind for e in mixed] == ["node.failed"]
    assert await ledger.events(run.run_id, categories=[]) == []
    first = (await ledger.events(run.run_id))[0]
    assert (first.kind, first.ts, first.node) == ("node.started", 10.0, "a")


async def test_publisher_gets_committed_events_with_sequence_numbers(ledger: LedgerStore) -> None:
    got: list[Event] = []
    ledger.publisher = got.extend
    run = make_run()
    await ledger.create_run(run, events=[ev(run.run_id, "run.queued")])
    ledger.stage_event(ev(run.run_id, "staged"))
    await ledger.flush()
    await ledger.transition(run.run_id, RunStatus.RUNNING, events=[ev(run.run_id, "run.started")])
    assert [(e.seq, e.kind) for e in got] == [(1, "run.queued"), (2, "staged"), (3, "run.started")]


# -- node records -----------------------------------------------------------------------------


async def test_staged_node_records_upsert_on_their_key(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    ledger.stage_node(node(run.run_id, status=NodeStatus.RUNNING))
    ledger.stage_node(
        node(run.run_id, status=NodeStatus.SUCCEEDED, finished_at=1002.5, metrics={"tokens": 7.0})
    )
    await ledger.flush()
    [only] = await ledger.node_records(run.run_id)
    assert only.status is NodeStatus.SUCCEEDED
    assert only.duration == pytest.approx(2.5)
    assert only.metrics == {"tokens": 7.0}


async def test_node_record_upserts_across_flushes(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    ledger.stage_node(node(run.run_id, status=NodeStatus.RUNNING))
    await ledger.flush()
    assert [r.status for r in await ledger.node_records(run.run_id)] == [NodeStatus.RUNNING]
    ledger.stage_node(
        node(
            run.run_id,
            status=NodeStatus.FAILED,
            finished_at=1001.0,
            error="ValueError: boom",
            failure_phase="stage",
        )
    )
    await ledger.transition(run.run_id, RunStatus.FAILED)  # flushes staged rows first
    [only] = await ledger.node_records(run.run_id)
    assert (only.status, only.error, only.failure_phase) == (
        NodeStatus.FAILED,
        "ValueError: boom",
        "stage",
    )


async def test_each_part_of_the_node_key_makes_a_separate_record(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    ledger.stage_node(node(run.run_id, started_at=1.0, name="a"))
    ledger.stage_node(node(run.run_id, task_id="t2", started_at=2.0, name="b"))
    ledger.stage_node(node(run.run_id, try_no=2, started_at=3.0, name="c"))
    ledger.stage_node(node(run.run_id, attempt=2, started_at=4.0, name="d"))
    await ledger.flush()
    records = await ledger.node_records(run.run_id)
    assert [r.node for r in records] == ["a", "b", "c", "d"]  # ordered by start
    assert {(r.task_id, r.attempt, r.try_no) for r in records} == {
        ("t1", 1, 1),
        ("t2", 1, 1),
        ("t1", 1, 2),
        ("t1", 2, 1),
    }


# -- leases -----------------------------------------------------------------------------------


async def test_lease_acquire_conflict_renew_release(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    held = await ledger.acquire_lease(run.run_id, "host:1:me", 30)
    assert held.lease_holder == "host:1:me"
    assert held.lease_expires_at == pytest.approx(time.time() + 30, abs=5)
    again = await ledger.acquire_lease(run.run_id, "host:1:me", 30)  # re-entrant for its holder
    assert again.lease_holder == "host:1:me"

    with pytest.raises(LeaseHeld) as info:
        await ledger.acquire_lease(run.run_id, "host:2:you", 30)
    assert "host:1:me" in str(info.value)
    assert info.value.holder == "host:1:me"

    renewed = await ledger.renew_lease(run.run_id, "host:1:me", 60)
    assert renewed is not None
    assert renewed.lease_expires_at == pytest.approx(time.time() + 60, abs=5)
    assert await ledger.renew_lease(run.run_id, "host:2:you", 60) is None

    await ledger.release_lease(run.run_id, "host:2:you")  # not the holder: no effect
    assert (await ledger.get_run(run.run_id)).lease_holder == "host:1:me"
    await ledger.release_lease(run.run_id, "host:1:me")
    released = await ledger.get_run(run.run_id)
    assert (released.lease_holder, released.lease_expires_at) == (None, None)
    assert await ledger.renew_lease(run.run_id, "host:1:me", 60) is None
    taken = await ledger.acquire_lease(run.run_id, "host:2:you", 30)
    assert taken.lease_holder == "host:2:you"


async def test_an_expired_lease_can_be_taken(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, "host:1:me", 0.01)
    await asyncio.sleep(0.05)
    taken = await ledger.acquire_lease(run.run_id, "host:2:you", 30)
    assert taken.lease_holder == "host:2:you"
    assert await ledger.renew_lease(run.run_id, "host:1:me", 30) is None


async def test_a_lease_held_by_a_dead_local_process_is_taken_at_once(ledger: LedgerStore) -> None:
    run = make_run()
    await ledger.create_run(run)
    await ledger.acquire_lease(run.run_id, DEAD_HOLDER, 3600)
    taken = await ledger.acquire_lease(run.run_id, "host:2:you", 30)
    assert taken.lease_holder == "host:2:you"


async def test_a_lease_held_by_a_live_local_process_is_not_taken(ledger: LedgerStore) -> None:
    import os

    run = make_run()
    await ledger.create_run(run)
    live = f"{socket.gethostname()}:{os.getpid()}:other"
    await ledger.acquire_lease(run.run_id, live, 3600)
    with pytest.raises(LeaseHeld, match=live):
        await ledger.acquire_lease(run.run_id, "host:2:you", 30)


# -- SQLite only ------------------------------------------------------------------------------


def _sqlite_url(path: Path) -> str:
    return f"sqlite:///{path}"


async def test_sqlite_schema_version_is_the_number_of_migrations(tmp_path: Path) -> None:
    opened = await open_backend(_sqlite_url(tmp_path / "a.db"), checkpoint_serde())
    try:
        assert await opened.ledger.schema_version() == len(MIGRATIONS)
    finally:
        await opened.aclose()


async def test_sqlite_opening_twice_is_idempotent(tmp_path: Path) -> None:
    url = _sqlite_url(tmp_path / "a.db")
    first = await open_backend(url, checkpoint_serde())
    run = make_run()
    try:
        await first.ledger.create_run(run, events=[ev(run.run_id, "run.queued")])
        second = await open_backend(url, checkpoint_serde())  # while the first is open
        try:
            assert await second.ledger.schema_version() == len(MIGRATIONS)
            assert (await second.ledger.get_run(run.run_id)).run_id == run.run_id
        finally:
            await second.aclose()
    finally:
        await first.aclose()
    third = await open_backend(url, checkpoint_serde())
    try:
        assert await third.ledger.schema_version() == len(MIGRATIONS)
        assert len(await third.ledger.events(run.run_id)) == 1
    finally:
        await third.aclose()
    with sqlite3.connect(tmp_path / "a.db") as db:
        versions = [v for (v,) in db.execute("SELECT version FROM stageline_schema_version")]
    assert sorted(versions) == list(range(1, len(MIGRATIONS) + 1))


async def test_sqlite_database_at_the_previous_schema_is_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    dialect = sqlite.dialect()
    with sqlite3.connect(path) as db:
        db.execute(str(CreateTable(schema_version).compile(dialect=dialect)))
        for number, migration in enumerate(MIGRATIONS[:-1], start=1):
            for stmt in migration(dialect):
                db.execute(stmt)
            db.execute("INSERT INTO stageline_schema_version VALUES (?, ?)", (number, 0.0))
    db.close()

    opened = await open_backend(_sqlite_url(path), checkpoint_serde())
    try:
        assert await opened.ledger.schema_version() == len(MIGRATIONS)
        run = make_run()
        await opened.ledger.create_run(run, events=[ev(run.run_id, "run.queued")])
        opened.ledger.stage_node(node(run.run_id))
        await opened.ledger.flush()
        assert len(await opened.ledger.node_records(run.run_id)) == 1
    finally:
        await opened.aclose()
    with sqlite3.connect(path) as db:
        versions = sorted(v for (v,) in db.execute("SELECT version FROM stageline_schema_version"))
        tables = {t for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    db.close()
    assert versions == list(range(1, len(MIGRATIONS) + 1))
    assert {"stageline_runs", "stageline_node_records", "stageline_events"} <= tables


class _S(TypedDict, total=False):
    n: int
    seen: dict[str, Any]


_DB: dict[str, Path] = {}


def _count_committed(path: Path, run_id: str) -> dict[str, Any]:
    with sqlite3.connect(path) as db:
        nodes = dict(
            db.execute(
                "SELECT node, status FROM stageline_node_records WHERE run_id = ?", (run_id,)
            ).fetchall()
        )
        kinds = [
            k
            for (k,) in db.execute(
                "SELECT kind FROM stageline_events WHERE run_id = ? ORDER BY seq", (run_id,)
            )
        ]
        checkpoints = db.execute(
            "SELECT COUNT(*) FROM stageline_checkpoints WHERE thread_id = ?", (run_id,)
        ).fetchone()[0]
    db.close()
    return {"nodes": nodes, "kinds": kinds, "checkpoints": checkpoints}


async def _first(state: _S, ctx: Any) -> dict[str, Any]:
    return {"n": 1}


async def _second(state: _S, ctx: Any) -> dict[str, Any]:
    # Read from another connection while the run is still going: the first node's rows must
    # already be committed, by the checkpoint write that followed it (no flush timer: see below).
    return {"seen": _count_committed(_DB["path"], ctx.run_id)}


async def test_sqlite_staged_rows_commit_with_the_checkpoint(
    tmp_path: Path, settings_for: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sql_staging, "FLUSH_DELAY", 3600.0)  # only checkpoint writes commit
    path = tmp_path / "run.db"
    _DB["path"] = path
    template = Template("commit_check", state=_S)
    template.add_stage("first", _first).add_stage("second", _second)
    template.add_edge("first", "second")
    async with Runner.open(settings_for(_sqlite_url(path))) as runner:
        summary = await runner.start(template, {})
    assert summary.status is RunStatus.SUCCEEDED
    seen = summary.state["seen"]
    assert seen["nodes"]["first"] == "succeeded"
    assert seen["kinds"][:2] == ["run.started", "node.started"]
    assert "node.succeeded" in seen["kinds"]
    assert seen["checkpoints"] >= 2

    after = _count_committed(path, summary.run.run_id)
    assert after["nodes"] == {"first": "succeeded", "second": "succeeded"}
    with sqlite3.connect(path) as db:
        (n_records,) = db.execute("SELECT COUNT(*) FROM stageline_node_records").fetchone()
        (n_events,) = db.execute("SELECT COUNT(*) FROM stageline_events").fetchone()
    db.close()
    assert n_records == 2
    assert n_events == summary.run.last_seq == len(after["kinds"])
    assert after["kinds"][-1] == "run.succeeded"


class _C(TypedDict, total=False):
    steps: list[str]


async def _cancel_me(state: _C, ctx: Any) -> dict[str, Any]:
    """Asks for its own run's cancel from a second connection, as another process would."""
    second = await open_backend(ctx.services["url"], checkpoint_serde())
    try:
        await second.ledger.request_cancel(ctx.run_id)
    finally:
        await second.aclose()
    return {"steps": [*state.get("steps", []), "first"]}


async def _after(state: _C, ctx: Any) -> dict[str, Any]:
    return {"steps": [*state.get("steps", []), "after"]}


async def test_a_cancel_stops_the_run_before_its_next_step(
    backend_url: str, settings_for: Any
) -> None:
    """The flag is read with each step's checkpoint commit, not only at lease renewals."""
    template = Template("cancel_between_steps", state=_C)
    template.add_stage("first", _cancel_me).add_stage("second", _after)
    template.add_edge("first", "second")
    async with Runner.open(settings_for(backend_url)) as runner:
        if backend_url.startswith("memory"):  # one process, one ledger: cancel through it
            template = Template("cancel_between_steps", state=_C)

            async def cancel_here(state: _C, ctx: Any) -> dict[str, Any]:
                await runner.ledger.request_cancel(ctx.run_id)
                return {"steps": ["first"]}

            template.add_stage("first", cancel_here).add_stage("second", _after)
            template.add_edge("first", "second")
        summary = await runner.start(template, {}, services={"url": backend_url})
    assert summary.status is RunStatus.CANCELLED
    assert [r.node for r in summary.records] == ["first"]
