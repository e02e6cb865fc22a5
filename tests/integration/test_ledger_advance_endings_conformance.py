"""Conformance for how an advance begins and ends in one transaction, every backend: a decision
with the claim of its run (``decide_and_claim``), an ending with what it does to the run's waits
(``end_advance``), and a transition refused without losing the rows staged for it.

Each test uses fresh run ids, so a shared database (Postgres) works too.
"""

from __future__ import annotations

import time
import uuid

import pytest

from stageline.errors import InvalidTransition
from stageline.ledger import (
    Backend,
    Event,
    LedgerStore,
    NodeRecord,
    NodeStatus,
    Run,
    RunClaim,
    RunStatus,
    SettleRound,
    Wait,
    WaitChanges,
    WaitKind,
    WaitStatus,
)

HOLDER = "elsewhere:1:me"


@pytest.fixture
def ledger(backend: Backend) -> LedgerStore:
    return backend.ledger


async def waiting_run(ledger: LedgerStore) -> tuple[str, Wait]:
    """A run waiting at gate ``g`` (round 1 pending)."""
    run_id = f"e-{uuid.uuid4().hex[:10]}"
    await ledger.create_run(
        Run(run_id=run_id, template="tpl", template_version="1", status=RunStatus.WAITING)
    )
    asked = Wait(
        run_id=run_id,
        wait_id="g-1",
        kind=WaitKind.GATE,
        name="g",
        node="g",
        attempt=1,
        interrupt_id="i1",
    )
    [opened] = await ledger.open_waits(run_id, [asked])
    return run_id, opened


def claim(run_id: str, holder: str = HOLDER) -> RunClaim:
    return RunClaim(
        holder=holder,
        ttl=3600,
        expect=(RunStatus.WAITING,),
        fields={"attempt": 1},
        events=(Event(run_id=run_id, kind="run.resumed"),),
    )


def ev(run_id: str, kind: str) -> Event:
    return Event(run_id=run_id, kind=kind)


async def kinds(ledger: LedgerStore, run_id: str) -> list[str]:
    return [e.kind for e in await ledger.events(run_id)]


async def decided_and_claimed(ledger: LedgerStore) -> tuple[str, Wait]:
    run_id, wait = await waiting_run(ledger)
    got = await ledger.decide_and_claim(
        run_id,
        wait.wait_id,
        wait.round,
        response={"decision": "reject", "token": wait.token},
        actor="ann",
        claim=claim(run_id),
        events=[ev(run_id, "gate.decided")],
    )
    assert got is not None
    [decided] = await ledger.waits(run_id)
    return run_id, decided


async def test_a_decision_and_its_claim_commit_together(ledger: LedgerStore) -> None:
    run_id, wait = await decided_and_claimed(ledger)
    assert wait.status is WaitStatus.DECIDED and wait.actor == "ann"
    run = await ledger.get_run(run_id)
    assert run.status is RunStatus.RUNNING and run.lease_holder == HOLDER
    assert await kinds(ledger, run_id) == ["gate.decided", "run.resumed"]


async def test_a_claim_reads_what_the_advance_needs_of_its_run(ledger: LedgerStore) -> None:
    run_id, _ = await waiting_run(ledger)
    claimed = await ledger.claim(run_id, claim(run_id))
    assert claimed.run.status is RunStatus.RUNNING and claimed.run.lease_holder == HOLDER
    assert (claimed.saved, claimed.records) == (False, ())  # no checkpoint, so no records
    assert await kinds(ledger, run_id) == ["run.resumed"]


async def test_a_refused_claim_records_nothing_of_the_decision(ledger: LedgerStore) -> None:
    run_id, wait = await waiting_run(ledger)
    await ledger.acquire_lease(run_id, "other:2:them", 3600)  # a live holder has it
    got = await ledger.decide_and_claim(
        run_id,
        wait.wait_id,
        wait.round,
        response={"decision": "approve", "token": wait.token},
        actor="ann",
        claim=claim(run_id),
        events=[ev(run_id, "gate.decided")],
    )
    assert got is None
    [still] = await ledger.waits(run_id)
    assert still.status is WaitStatus.PENDING and still.response is None
    run = await ledger.get_run(run_id)
    assert run.status is RunStatus.WAITING and run.lease_holder == "other:2:them"
    assert await kinds(ledger, run_id) == []


async def test_an_ending_settles_asks_and_moves_the_run_in_one_commit(
    ledger: LedgerStore,
) -> None:
    run_id, decided = await decided_and_claimed(ledger)
    record = NodeRecord(
        run_id=run_id,
        task_id="t1",
        attempt=1,
        try_no=1,
        node="g",
        stage="g",
        status=NodeStatus.SUCCEEDED,
        started_at=time.time(),
        finished_at=time.time(),
    )
    ledger.stage_node(record)
    ledger.stage_event(ev(run_id, "node.succeeded"))
    again = Wait(
        run_id=run_id,
        wait_id="g-2",
        kind=WaitKind.GATE,
        name="g2",
        node="g2",
        attempt=1,
        interrupt_id="i2",
    )
    ended = await ledger.end_advance(
        run_id,
        RunStatus.WAITING,
        waits=WaitChanges(
            settle=[SettleRound(wait=decided, status=WaitStatus.APPLIED)],
            asked=[again],
            asked_events=[ev(run_id, "gate.waiting")],
        ),
        release=True,
        events=[ev(run_id, "run.waiting")],
    )
    assert ended is not None and ended.status is RunStatus.WAITING
    assert ended.lease_holder is None
    found = {(w.wait_id, w.round): w.status for w in await ledger.waits(run_id)}
    assert found == {("g-1", 1): WaitStatus.APPLIED, ("g-2", 1): WaitStatus.PENDING}
    assert [r.task_id for r in await ledger.node_records(run_id)] == ["t1"]
    assert await kinds(ledger, run_id) == [
        "gate.decided",
        "run.resumed",
        "node.succeeded",
        "gate.waiting",
        "run.waiting",
    ]


async def test_an_ending_without_release_keeps_the_lease(ledger: LedgerStore) -> None:
    run_id, decided = await decided_and_claimed(ledger)
    ended = await ledger.end_advance(
        run_id,
        RunStatus.SUCCEEDED,
        waits=WaitChanges(settle=[SettleRound(wait=decided, status=WaitStatus.APPLIED)]),
        events=[ev(run_id, "run.succeeded")],
    )
    assert ended is not None and ended.status is RunStatus.SUCCEEDED
    assert ended.lease_holder == HOLDER
    assert (await ledger.get_run(run_id)).lease_holder == HOLDER


async def test_an_ending_expecting_another_status_is_refused_and_changes_nothing(
    ledger: LedgerStore,
) -> None:
    run_id, decided = await decided_and_claimed(ledger)
    with pytest.raises(InvalidTransition, match=f"run {run_id} is running; cannot make it"):
        await ledger.end_advance(
            run_id,
            RunStatus.SUCCEEDED,
            waits=WaitChanges(settle=[SettleRound(wait=decided, status=WaitStatus.APPLIED)]),
            expect=[RunStatus.QUEUED],
            events=[ev(run_id, "run.succeeded")],
        )
    assert (await ledger.get_run(run_id)).status is RunStatus.RUNNING
    [still] = await ledger.waits(run_id)
    assert still.status is WaitStatus.DECIDED


async def test_a_cancel_requested_before_an_ending_wins_it(ledger: LedgerStore) -> None:
    run_id, decided = await decided_and_claimed(ledger)
    await ledger.request_cancel(run_id)
    ended = await ledger.end_advance(
        run_id,
        RunStatus.SUCCEEDED,
        waits=WaitChanges(settle=[SettleRound(wait=decided, status=WaitStatus.APPLIED)]),
        release=True,
        cancel_wins=[ev(run_id, "run.cancelled")],
        events=[ev(run_id, "run.succeeded")],
    )
    assert ended is not None and ended.status is RunStatus.CANCELLED
    assert (await kinds(ledger, run_id))[-1] == "run.cancelled"
    assert "run.succeeded" not in await kinds(ledger, run_id)


async def test_an_ending_whose_round_moved_on_changes_nothing(ledger: LedgerStore) -> None:
    run_id, decided = await decided_and_claimed(ledger)
    # Someone moves the round on between the advance's read and its ending.
    await ledger.settle_wait(
        run_id, decided.wait_id, decided.round, WaitStatus.ROLLED_BACK, reason="elsewhere"
    )
    ledger.stage_event(ev(run_id, "node.succeeded"))
    ended = await ledger.end_advance(
        run_id,
        RunStatus.REJECTED,
        waits=WaitChanges(settle=[SettleRound(wait=decided, status=WaitStatus.APPLIED)]),
        release=True,
        events=[ev(run_id, "run.rejected")],
    )
    assert ended is None
    assert (await ledger.get_run(run_id)).status is RunStatus.RUNNING
    [moved] = await ledger.waits(run_id)
    assert moved.status is WaitStatus.ROLLED_BACK and moved.reason == "elsewhere"
    await ledger.flush()  # the staged rows were kept for the next commit
    assert await kinds(ledger, run_id) == ["gate.decided", "run.resumed", "node.succeeded"]


async def test_a_refused_transition_keeps_the_rows_staged_for_it(ledger: LedgerStore) -> None:
    run_id, _ = await decided_and_claimed(ledger)
    ledger.stage_event(ev(run_id, "node.succeeded"))
    with pytest.raises(InvalidTransition):
        await ledger.transition(
            run_id, RunStatus.SUCCEEDED, expect=[RunStatus.QUEUED], release=True
        )
    await ledger.flush()
    assert await kinds(ledger, run_id) == ["gate.decided", "run.resumed", "node.succeeded"]


async def test_a_claim_may_be_made_of_the_run_it_reads(ledger: LedgerStore) -> None:
    run_id, _ = await waiting_run(ledger)
    seen: list[RunStatus] = []

    def of(run: Run) -> RunClaim:
        seen.append(run.status)
        return claim(run_id)

    claimed = await ledger.claim(run_id, of)
    assert seen == [RunStatus.WAITING] and claimed.run.status is RunStatus.RUNNING

    def refused(run: Run) -> RunClaim:
        raise InvalidTransition(f"run {run.run_id} is {run.status}")

    other, _ = await waiting_run(ledger)
    with pytest.raises(InvalidTransition):
        await ledger.claim(other, refused)
    after = await ledger.get_run(other)
    assert (after.status, after.lease_holder) == (RunStatus.WAITING, None)
    assert await kinds(ledger, other) == []
