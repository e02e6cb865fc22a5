"""Conformance for the ledger's waits (gates, questions) and side-effect journal, every backend.

Each test uses fresh run ids, so a shared database (Postgres) works too.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.dialects import sqlite
from sqlalchemy.schema import CreateTable

from stageline.checkpoints import checkpoint_serde
from stageline.errors import AlreadyDecided, InvalidTransition
from stageline.ledger import (
    Backend,
    Effect,
    EffectStatus,
    Event,
    LedgerStore,
    Run,
    RunStatus,
    Wait,
    WaitKind,
    WaitStatus,
    open_backend,
)
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._schema import schema_version


def uid(prefix: str = "r") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def new_run(ledger: LedgerStore) -> str:
    run = Run(run_id=uid(), template="tpl", template_version="1+abc", status=RunStatus.WAITING)
    await ledger.create_run(run)
    return run.run_id


def gate(
    run_id: str, *, wait_id: str = "g-1", attempt: int = 1, interrupt_id: str = "i1", **kw: Any
) -> Wait:
    fields: dict[str, Any] = {
        "payload": {"state_hash": "abc", "show": {"n": [1, 2]}},
        "requested_at": 1000.0,
        "deadline_at": 1060.0,
        "policy": ("remind", "escalate", "reject"),
        **kw,
    }
    return Wait(
        run_id=run_id,
        wait_id=wait_id,
        kind=WaitKind.GATE,
        name="approval",
        node="approval",
        attempt=attempt,
        interrupt_id=interrupt_id,
        **fields,
    )


def ev(run_id: str, kind: str) -> Event:
    return Event(run_id=run_id, kind=kind)


# -- opening --------------------------------------------------------------------------------


async def test_open_waits_records_a_pending_round_with_every_field(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    [opened] = await ledger.open_waits(run_id, [gate(run_id)], events=[ev(run_id, "gate.waiting")])
    assert (opened.round, opened.status, opened.policy_step) == (1, WaitStatus.PENDING, 0)
    assert opened.payload == {"state_hash": "abc", "show": {"n": [1, 2]}}
    assert opened.policy == ("remind", "escalate", "reject")
    assert (opened.deadline_at, opened.requested_at) == (1060.0, 1000.0)
    assert await ledger.waits(run_id) == [opened]
    assert await ledger.pending_waits(run_id=run_id) == [opened]
    assert opened.state_hash == "abc" and opened.token == "g-1#1"
    assert [e.kind for e in await ledger.events(run_id)] == ["gate.waiting"]


async def test_asking_again_in_the_same_attempt_changes_nothing(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    [first] = await ledger.open_waits(run_id, [gate(run_id)])
    [again] = await ledger.open_waits(run_id, [gate(run_id, requested_at=2000.0)])
    assert again == first
    assert len(await ledger.waits(run_id)) == 1


async def test_a_new_attempt_closes_the_old_round_and_opens_another(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    [second] = await ledger.open_waits(run_id, [gate(run_id, attempt=2, requested_at=1001.0)])
    assert (second.round, second.attempt, second.status) == (2, 2, WaitStatus.PENDING)
    old, new = await ledger.waits(run_id)
    assert (old.status, old.reason) == (WaitStatus.CLOSED, "asked again in attempt 2")
    assert new == second
    assert [w.round for w in await ledger.pending_waits(run_id=run_id)] == [2]


async def test_asking_again_while_a_round_is_decided_rolls_that_round_back(
    ledger: LedgerStore,
) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    await ledger.decide_wait(run_id, "g-1", 1, response={"decision": "approve"}, actor="ann")
    [again] = await ledger.open_waits(run_id, [gate(run_id)])
    assert (again.round, again.status) == (2, WaitStatus.PENDING)
    first = (await ledger.waits(run_id))[0]
    assert first.status is WaitStatus.ROLLED_BACK
    assert first.reason and "never reached the node" in first.reason


# -- deciding -------------------------------------------------------------------------------


async def test_the_first_decision_wins_and_a_second_is_refused(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    decided = await ledger.decide_wait(
        run_id,
        "g-1",
        1,
        response={"decision": "approve", "attempt": 1},
        actor="ann",
        note="looks good",
        events=[ev(run_id, "gate.decided")],
    )
    assert decided.status is WaitStatus.DECIDED
    assert (decided.decision, decided.actor, decided.note) == ("approve", "ann", "looks good")
    assert decided.response == {"decision": "approve", "attempt": 1}
    assert decided.decided_at == pytest.approx(time.time(), abs=5)
    with pytest.raises(AlreadyDecided, match=r"already approved by ann") as info:
        await ledger.decide_wait(
            run_id,
            "g-1",
            1,
            response={"decision": "reject"},
            actor="bob",
            events=[ev(run_id, "gate.decided")],
        )
    assert info.value.exit_code == 5
    assert await ledger.waits(run_id) == [decided]
    assert [e.kind for e in await ledger.events(run_id)] == ["gate.decided"]  # the loser's: none
    assert await ledger.pending_waits(run_id=run_id) == []


async def test_deciding_an_unknown_round_is_an_invalid_transition(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    with pytest.raises(InvalidTransition, match="no wait"):
        await ledger.decide_wait(run_id, "nope", 1, response={}, actor=None)


async def test_two_connections_deciding_at_once_record_one_decision(
    shared_backend_url: str,
) -> None:
    backend_url = shared_backend_url
    one = await open_backend(backend_url, checkpoint_serde())
    two = await open_backend(backend_url, checkpoint_serde())
    try:
        run_id = await new_run(one.ledger)
        await one.ledger.open_waits(run_id, [gate(run_id)])
        for _ in range(5):
            results = await asyncio.gather(
                *(
                    b.ledger.decide_wait(run_id, "g-1", 1, response={"decision": d}, actor=d)
                    for b, d in ((one, "approve"), (two, "reject"))
                ),
                return_exceptions=True,
            )
            assert sum(isinstance(r, Wait) for r in results) <= 1
            assert all(isinstance(r, Wait | AlreadyDecided) for r in results), results
        [only] = await two.ledger.waits(run_id)
        assert only.status is WaitStatus.DECIDED and only.decision in ("approve", "reject")
    finally:
        await one.aclose()
        await two.aclose()


# -- settling -------------------------------------------------------------------------------


async def test_rolling_back_marks_the_round_and_asks_again(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    await ledger.decide_wait(run_id, "g-1", 1, response={"decision": "approve"}, actor="ann")
    rolled = await ledger.settle_wait(
        run_id,
        "g-1",
        1,
        WaitStatus.ROLLED_BACK,
        reason="resume failed: boom",
        reopen=True,
        events=[ev(run_id, "gate.rolled_back")],
    )
    assert rolled is not None
    assert (rolled.status, rolled.reason, rolled.decision) == (
        WaitStatus.ROLLED_BACK,
        "resume failed: boom",
        "approve",
    )
    assert rolled.settled_at is not None
    first, second = await ledger.waits(run_id)
    assert first == rolled
    assert (second.round, second.status, second.response, second.actor) == (
        2,
        WaitStatus.PENDING,
        None,
        None,
    )
    assert (second.deadline_at, second.payload) == (first.deadline_at, first.payload)
    assert await ledger.settle_wait(run_id, "g-1", 1, WaitStatus.APPLIED) is None  # not decided
    assert [e.kind for e in await ledger.events(run_id)] == ["gate.rolled_back"]
    decided = await ledger.decide_wait(
        run_id, "g-1", 2, response={"decision": "reject"}, actor="bob"
    )
    assert decided.round == 2
    applied = await ledger.settle_wait(run_id, "g-1", 2, WaitStatus.APPLIED)
    assert applied is not None and applied.status is WaitStatus.APPLIED


async def test_settle_takes_any_of_the_expected_statuses(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    assert await ledger.settle_wait(run_id, "g-1", 1, WaitStatus.EXPIRED) is None
    expired = await ledger.settle_wait(
        run_id,
        "g-1",
        1,
        WaitStatus.EXPIRED,
        reason="deadline",
        expect=[WaitStatus.PENDING, WaitStatus.DECIDED],
    )
    assert expired is not None and expired.status is WaitStatus.EXPIRED
    assert await ledger.settle_wait(run_id, "nope", 1, WaitStatus.EXPIRED) is None


async def test_policy_steps_are_taken_once_each_in_order(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    assert not await ledger.advance_policy(run_id, "g-1", 1, step=2)  # not after step 0
    assert await ledger.advance_policy(
        run_id, "g-1", 1, step=1, events=[ev(run_id, "gate.reminded")]
    )
    assert not await ledger.advance_policy(
        run_id, "g-1", 1, step=1, events=[ev(run_id, "gate.reminded")]
    )
    assert await ledger.advance_policy(
        run_id, "g-1", 1, step=2, events=[ev(run_id, "gate.escalated")]
    )
    [wait] = await ledger.waits(run_id)
    assert wait.policy_step == 2
    assert [e.kind for e in await ledger.events(run_id)] == ["gate.reminded", "gate.escalated"]
    await ledger.decide_wait(run_id, "g-1", 1, response={"decision": "approve"}, actor="ann")
    assert not await ledger.advance_policy(run_id, "g-1", 1, step=3)  # no longer pending


async def test_close_waits_and_pending_across_runs(ledger: LedgerStore) -> None:
    one, two = await new_run(ledger), await new_run(ledger)
    await ledger.open_waits(one, [gate(one, requested_at=time.time() - 10)])
    question = Wait(
        run_id=two,
        wait_id="q-0",
        kind=WaitKind.QUESTION,
        name="clarify",
        node="clarify",
        attempt=1,
        interrupt_id="i2",
        payload={"questions": [{"id": "scope", "text": "What?"}]},
    )
    await ledger.open_waits(two, [question])
    everyone = [(w.run_id, w.kind) for w in await ledger.pending_waits() if w.run_id in (one, two)]
    assert everyone == [(one, WaitKind.GATE), (two, WaitKind.QUESTION)]
    assert await ledger.close_waits(one, "run cancelled") == 1
    assert await ledger.close_waits(one, "run cancelled") == 0
    [closed] = await ledger.waits(one)
    assert (closed.status, closed.reason) == (WaitStatus.CLOSED, "run cancelled")
    assert [w.run_id for w in await ledger.pending_waits() if w.run_id in (one, two)] == [two]


# -- effects --------------------------------------------------------------------------------


async def test_an_effect_is_begun_once_and_keeps_its_result(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    effect = Effect(run_id=run_id, node="n", key="send", attempt=1)
    assert await ledger.begin_effect(effect)
    assert not await ledger.begin_effect(effect)
    started = await ledger.get_effect(run_id, "n", "send")
    assert started is not None and started.status is EffectStatus.STARTED
    assert started.result is None and started.finished_at is None
    await ledger.finish_effect(run_id, "n", "send", {"id": 7, "to": ["a"]})
    done = await ledger.get_effect(run_id, "n", "send")
    assert done is not None and done.status is EffectStatus.DONE
    assert done.result == {"id": 7, "to": ["a"]} and done.finished_at is not None
    assert await ledger.get_effect(run_id, "other", "send") is None
    assert [e.key for e in await ledger.effects(run_id)] == ["send"]
    assert await ledger.forget_effect(run_id, "n", "send")
    assert not await ledger.forget_effect(run_id, "n", "send")
    assert await ledger.begin_effect(effect)


async def test_delete_run_removes_its_waits_and_effects(ledger: LedgerStore) -> None:
    run_id = await new_run(ledger)
    await ledger.open_waits(run_id, [gate(run_id)])
    await ledger.begin_effect(Effect(run_id=run_id, node="n", key="k", attempt=1))
    await ledger.delete_run(run_id)
    assert await ledger.waits(run_id) == []
    assert await ledger.effects(run_id) == []


# -- migration 2 ----------------------------------------------------------------------------


async def test_sqlite_at_schema_1_gains_the_wait_and_effect_tables(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    dialect = sqlite.dialect()
    with sqlite3.connect(path) as db:
        db.execute(str(CreateTable(schema_version).compile(dialect=dialect)))
        for stmt in MIGRATIONS[0](dialect):
            db.execute(stmt)
        db.execute("INSERT INTO stageline_schema_version VALUES (1, 0.0)")
        db.execute(
            "INSERT INTO stageline_runs (run_id, template, template_version, status, attempt, "
            "inputs, created_at, updated_at, cancel_requested, last_seq) "
            "VALUES ('old', 't', '1', 'waiting', 1, '{}', 1.0, 1.0, 0, 0)"
        )
    db.close()
    opened = await open_backend(f"sqlite:///{path}", checkpoint_serde())
    try:
        assert await opened.ledger.schema_version() == len(MIGRATIONS) >= 2
        [wait] = await opened.ledger.open_waits("old", [gate("old")])
        assert wait.status is WaitStatus.PENDING
        assert (await opened.ledger.get_run("old")).status is RunStatus.WAITING
    finally:
        await opened.aclose()
