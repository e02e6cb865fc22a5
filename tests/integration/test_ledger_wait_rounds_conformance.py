"""A round asked again starts clean, whichever process asks; policy steps reach the sinks.

Conformance (every backend): what the runner and the CLI rely on when a decided round is rolled
back or refused and asked again, possibly from another process than the one that opened it.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import (
    Backend,
    Event,
    LedgerStore,
    Run,
    RunStatus,
    Wait,
    WaitKind,
    WaitStatus,
    open_backend,
)


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def _waiting_run(ledger: LedgerStore) -> str:
    run_id = f"w-{uuid.uuid4().hex[:10]}"
    await ledger.create_run(
        Run(run_id=run_id, template="tpl", template_version="1+abc", status=RunStatus.WAITING)
    )
    return run_id


def _gate(run_id: str) -> Wait:
    return Wait(
        run_id=run_id,
        wait_id="g-1",
        kind=WaitKind.GATE,
        name="approval",
        node="approval",
        attempt=1,
        interrupt_id="i1",
        payload={"state_hash": "abc"},
        requested_at=1000.0,
        deadline_at=1060.0,
        policy=("remind", "reject"),
    )


async def _decide_and_refuse(ledger: LedgerStore, run_id: str) -> Wait | None:
    """A decision with a note, refused as stale by the node: asked again in round 2."""
    await ledger.decide_wait(
        run_id, "g-1", 1, response={"decision": "approve"}, actor="ann", note="ship it"
    )
    return await ledger.settle_wait(
        run_id, "g-1", 1, WaitStatus.REFUSED, reason="decided on another state", reopen=True
    )


async def test_a_round_asked_again_carries_nothing_of_the_last_decision(
    ledger: LedgerStore,
) -> None:
    run_id = await _waiting_run(ledger)
    await ledger.open_waits(run_id, [_gate(run_id)])
    refused = await _decide_and_refuse(ledger, run_id)
    assert refused is not None
    assert (refused.note, refused.reason) == ("ship it", "decided on another state")
    assert refused.decided_at is not None and refused.settled_at is not None

    [fresh] = await ledger.pending_waits(run_id=run_id)
    assert (fresh.round, fresh.status) == (2, WaitStatus.PENDING)
    assert (fresh.response, fresh.actor, fresh.note) == (None, None, None)
    assert (fresh.decided_at, fresh.settled_at, fresh.reason) == (None, None, None)
    # What a reviewer is asked stays the same: the payload, deadline and policy.
    assert (fresh.payload, fresh.deadline_at, fresh.policy) == (
        {"state_hash": "abc"},
        1060.0,
        ("remind", "reject"),
    )
    decided = await ledger.decide_wait(
        run_id, "g-1", 2, response={"decision": "reject"}, actor="bob"
    )
    assert (decided.actor, decided.note, decided.decision) == ("bob", None, "reject")


async def test_another_process_can_refuse_a_round_and_ask_it_again(
    shared_backend_url: str,
) -> None:
    """The CLI opens and decides; a runner started afterwards refuses it and asks again."""
    opener = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        run_id = await _waiting_run(opener.ledger)
        await opener.ledger.open_waits(run_id, [_gate(run_id)])
        await opener.ledger.decide_wait(
            run_id, "g-1", 1, response={"decision": "approve"}, actor="ann"
        )
    finally:
        await opener.aclose()
    runner = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        refused = await runner.ledger.settle_wait(
            run_id, "g-1", 1, WaitStatus.REFUSED, reason="stale", reopen=True
        )
        assert refused is not None and refused.status is WaitStatus.REFUSED
        rounds = await runner.ledger.waits(run_id)
        assert [(w.round, w.status) for w in rounds] == [
            (1, WaitStatus.REFUSED),
            (2, WaitStatus.PENDING),
        ]
    finally:
        await runner.aclose()


async def test_every_wait_write_reaches_the_publisher_once_committed(ledger: LedgerStore) -> None:
    run_id = await _waiting_run(ledger)
    published: list[Event] = []
    ledger.publisher = published.extend

    def ev(kind: str) -> Event:
        return Event(run_id=run_id, kind=kind)

    await ledger.open_waits(run_id, [_gate(run_id)], events=[ev("gate.waiting")])
    assert await ledger.advance_policy(run_id, "g-1", 1, step=1, events=[ev("gate.reminded")])
    assert not await ledger.advance_policy(run_id, "g-1", 1, step=1, events=[ev("gate.reminded")])
    await ledger.decide_wait(
        run_id, "g-1", 1, response={"decision": "approve"}, actor="ann", events=[ev("gate.decided")]
    )
    await ledger.settle_wait(run_id, "g-1", 1, WaitStatus.APPLIED, events=[ev("gate.applied")])
    assert [(e.seq, e.kind) for e in published] == [
        (1, "gate.waiting"),
        (2, "gate.reminded"),  # once: the losing step published nothing
        (3, "gate.decided"),
        (4, "gate.applied"),
    ]


async def test_pending_rounds_of_one_run_leave_out_the_other_runs(ledger: LedgerStore) -> None:
    one, other = await _waiting_run(ledger), await _waiting_run(ledger)
    for run_id in (one, other):
        await ledger.open_waits(run_id, [_gate(run_id)])
    assert [w.run_id for w in await ledger.pending_waits(run_id=one)] == [one]
    assert {w.run_id for w in await ledger.pending_waits()} >= {one, other}


async def test_a_round_is_opened_pending_whatever_status_it_was_handed(
    ledger: LedgerStore,
) -> None:
    run_id = await _waiting_run(ledger)
    [opened] = await ledger.open_waits(run_id, [replace(_gate(run_id), status=WaitStatus.EXPIRED)])
    assert opened.status is WaitStatus.PENDING
    assert [w.round for w in await ledger.pending_waits(run_id=run_id)] == [1]


async def test_settle_accepts_three_expected_statuses(ledger: LedgerStore) -> None:
    run_id = await _waiting_run(ledger)
    await ledger.open_waits(run_id, [_gate(run_id)])
    closed = await ledger.settle_wait(
        run_id,
        "g-1",
        1,
        WaitStatus.CLOSED,
        reason="run cancelled",
        expect=[WaitStatus.DECIDED, WaitStatus.REFUSED, WaitStatus.PENDING],
    )
    assert closed is not None and (closed.status, closed.reason) == (
        WaitStatus.CLOSED,
        "run cancelled",
    )
