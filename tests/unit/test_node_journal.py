"""The runner's journal as the stage nodes use it: what a node's start and end leave in the
ledger (records, events, outcome rows), tries after a process died, budgets, and the
side-effect journal (once per key, in doubt after a crash, forgotten when it raised).

The journal stages its rows; the step's checkpoint commits them. Here ``flush`` stands for that
commit, before the ledger is read."""

from __future__ import annotations

import time
from pathlib import PurePosixPath
from typing import Any

import pytest

from stageline.errors import EffectInDoubt
from stageline.ledger import (
    Effect,
    EventCategory,
    NodeRecord,
    NodeStatus,
    Outcome,
    Run,
    RunStatus,
)
from stageline.runner._journal import ROUTER_HISTORY, LedgerJournal
from stageline.stages import Budget
from stageline.testing import MemoryLedger

RUN = "journal-run"


@pytest.fixture
async def ledger() -> MemoryLedger:
    store = MemoryLedger()
    await store.create_run(
        Run(run_id=RUN, template="t", template_version="1", status=RunStatus.RUNNING)
    )
    return store


def record(task: str, try_no: int, status: NodeStatus, *, attempt: int = 2) -> NodeRecord:
    return NodeRecord(
        run_id=RUN,
        task_id=task,
        attempt=attempt,
        try_no=try_no,
        node="n",
        stage="n",
        status=status,
        started_at=1.0,
    )


def finish(journal: LedgerJournal, status: str, **given: Any) -> None:
    args: dict[str, Any] = {
        "node": "draft",
        "task_id": "t1",
        "try_no": 1,
        "stage": "write",
        "status": status,
        "started": 100.0,
        "metrics": {},
    }
    journal.node_finished(**{**args, **given})


async def events(ledger: MemoryLedger, kind: str) -> list[Any]:
    await ledger.flush()
    return [e for e in await ledger.events(RUN) if e.kind == kind]


# -- a node's start --------------------------------------------------------------------------


async def test_a_start_is_a_running_record_and_a_started_event(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 3)
    before = time.time()
    assert journal.node_started(node="draft", task_id="t1", try_no=2, stage="write") == 2
    after = time.time()
    await ledger.flush()  # the step's commit
    [started] = await ledger.node_records(RUN)
    assert (started.run_id, started.task_id, started.attempt, started.try_no) == (RUN, "t1", 3, 2)
    assert (started.node, started.stage, started.status) == ("draft", "write", NodeStatus.RUNNING)
    assert before <= started.started_at <= after
    assert started.finished_at is None
    assert journal.records == {("t1", 2): started}  # a fresh run's summary reads these
    [event] = await events(ledger, "node.started")
    assert event.node == "draft"
    assert event.ts == started.started_at
    assert dict(event.data) == {"attempt": 3, "try": 2}


async def test_a_node_an_earlier_process_left_running_starts_again_as_a_new_try(
    ledger: MemoryLedger,
) -> None:
    earlier = [record("t1", 1, NodeStatus.FAILED), record("t1", 2, NodeStatus.RUNNING)]
    journal = LedgerJournal(ledger, RUN, 2, previous=earlier)
    # LangGraph counts from 1 again in the new process: the try moves past both earlier ones.
    assert journal.node_started(node="n", task_id="t1", try_no=1, stage="n") == 3
    assert journal.node_started(node="n", task_id="t1", try_no=2, stage="n") == 4  # same shift
    await ledger.flush()  # the step's commit
    tries = {(r.try_no, r.status) for r in await ledger.node_records(RUN) if r.attempt == 2}
    assert (3, NodeStatus.RUNNING) in tries and (4, NodeStatus.RUNNING) in tries
    started = await events(ledger, "node.started")
    assert [e.data["try"] for e in started] == [3, 4]


async def test_the_replay_of_a_node_that_waited_finishes_its_own_record(
    ledger: MemoryLedger,
) -> None:
    earlier = [record("t1", 1, NodeStatus.WAITING)]
    journal = LedgerJournal(ledger, RUN, 2, previous=earlier)
    assert journal.node_started(node="n", task_id="t1", try_no=1, stage="n") == 1


async def test_only_tries_that_clash_in_this_attempt_move(ledger: MemoryLedger) -> None:
    earlier = [
        record("t1", 1, NodeStatus.RUNNING, attempt=1),  # an earlier attempt: no clash
        record("t2", 1, NodeStatus.FAILED),
    ]
    journal = LedgerJournal(ledger, RUN, 2, previous=earlier)
    assert journal.node_started(node="n", task_id="t1", try_no=1, stage="n") == 1
    assert journal.node_started(node="n", task_id="t2", try_no=2, stage="n") == 2  # no clash
    assert journal.node_started(node="n", task_id="t3", try_no=1, stage="n") == 1


# -- a node's end ----------------------------------------------------------------------------


async def test_a_success_finishes_the_record_with_its_metrics(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    metrics = {"input_tokens": 10.0, "cost": 0.5}
    before = time.time()
    finish(journal, "succeeded", try_no=2, metrics=metrics)
    after = time.time()
    await ledger.flush()  # the step's commit
    [done] = await ledger.node_records(RUN)
    assert (done.task_id, done.attempt, done.try_no) == ("t1", 1, 2)
    assert (done.node, done.stage, done.status) == ("draft", "write", NodeStatus.SUCCEEDED)
    assert done.started_at == 100.0
    assert done.finished_at is not None and before <= done.finished_at <= after
    assert dict(done.metrics) == metrics
    assert (done.error, done.failure_phase) == (None, None)
    assert journal.records[("t1", 2)] == done
    [event] = await events(ledger, "node.succeeded")
    assert (event.node, event.level, event.message) == ("draft", "info", "")
    assert event.category is EventCategory.LIFECYCLE
    assert event.ts == done.finished_at
    assert event.data == {
        "attempt": 1,
        "try": 2,
        "duration": round(done.finished_at - 100.0, 6),
        "metrics": metrics,
    }


async def test_a_failure_is_an_error_event_naming_its_phase(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    finish(journal, "failed", error="ValueError: no", failure_phase="timeout")
    await ledger.flush()  # the step's commit
    [failed] = await ledger.node_records(RUN)
    assert failed.status is NodeStatus.FAILED
    assert (failed.error, failed.failure_phase) == ("ValueError: no", "timeout")
    [event] = await events(ledger, "node.failed")
    assert (event.level, event.message) == ("error", "ValueError: no")
    assert event.category is EventCategory.ERROR
    assert event.data["failure_phase"] == "timeout"
    assert "metrics" not in event.data  # none were measured


async def test_a_node_that_waits_is_logged_as_waiting_without_a_phase(
    ledger: MemoryLedger,
) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    finish(journal, "waiting", template="t")
    await ledger.flush()  # the step's commit
    [waiting] = await ledger.node_records(RUN)
    assert waiting.status is NodeStatus.WAITING
    [event] = await events(ledger, "node.waiting")
    assert (event.level, event.category) == ("info", EventCategory.LIFECYCLE)
    assert set(event.data) == {"attempt", "try", "duration"}
    assert await ledger.outcomes() == []  # a wait is no outcome: the replay records it
    assert journal.last_failure is None


async def test_the_last_failure_is_forgotten_once_that_node_succeeds(
    ledger: MemoryLedger,
) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    finish(journal, "failed", task_id="t1", error="boom")
    assert journal.last_failure is not None and journal.last_failure.task_id == "t1"
    finish(journal, "succeeded", task_id="t2")  # another node: t1's failure still stands
    assert journal.last_failure is not None and journal.last_failure.task_id == "t1"
    finish(journal, "succeeded", task_id="t1", try_no=2)  # its retry succeeded
    assert journal.last_failure is None


async def test_a_finished_node_of_a_template_is_an_outcome_row(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 2)
    metrics = {"input_tokens": 7, "output_tokens": 3, "cost": 0.25, "quality": 1}
    finish(
        journal,
        "failed",
        try_no=3,
        metrics=metrics,
        error="x",
        failure_phase="stage",
        template="blog",
        capability="write",
        alternative="fast",
        input_shape="abc",
    )
    await ledger.flush()  # the step's commit
    [row] = await ledger.outcomes()
    [done] = await ledger.node_records(RUN)
    assert done.finished_at is not None
    assert row == Outcome(
        run_id=RUN,
        task_id="t1",
        attempt=2,
        try_no=3,
        template="blog",
        node="draft",
        stage="write",
        capability="write",
        alternative="fast",
        input_shape="abc",
        status="failed",
        failure_phase="stage",
        started_at=100.0,
        finished_at=done.finished_at,
        latency=done.finished_at - 100.0,
        input_tokens=7.0,
        output_tokens=3.0,
        cost=0.25,
        quality=1.0,
    )
    assert isinstance(row.quality, float) and isinstance(row.input_tokens, float)


async def test_an_outcome_without_measures_counts_zero_and_no_quality(
    ledger: MemoryLedger,
) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    finish(journal, "succeeded", template="blog")
    await ledger.flush()  # the step's commit
    [row] = await ledger.outcomes(template="blog")
    assert (row.status, row.failure_phase) == ("succeeded", None)
    assert (row.input_tokens, row.output_tokens, row.cost, row.quality) == (0.0, 0.0, 0.0, None)
    assert (row.capability, row.alternative, row.input_shape) == (None, None, "")
    assert row.latency == row.finished_at - row.started_at >= 0


async def test_without_a_template_no_outcome_is_kept(ledger: MemoryLedger) -> None:
    finish(LedgerJournal(ledger, RUN, 1), "succeeded")
    await ledger.flush()  # the step's commit
    assert await ledger.outcomes() == []


# -- routing and budgets ---------------------------------------------------------------------


class CountingLedger(MemoryLedger):
    def __init__(self) -> None:
        super().__init__()
        self.reads: list[dict[str, Any]] = []

    async def outcomes(self, **given: Any) -> list[Outcome]:
        self.reads.append(given)
        return await super().outcomes(**given)


async def test_the_router_reads_a_templates_routed_outcomes_once_per_advance() -> None:
    ledger = CountingLedger()
    await ledger.create_run(
        Run(run_id=RUN, template="t", template_version="1", status=RunStatus.RUNNING)
    )
    earlier = LedgerJournal(ledger, RUN, 1)
    finish(earlier, "succeeded", task_id="a", template="blog", alternative="fast")
    finish(earlier, "succeeded", task_id="b", template="blog")  # not routed
    finish(earlier, "succeeded", task_id="c", template="wiki", alternative="fast")
    await ledger.flush()  # the earlier advance committed them
    journal = LedgerJournal(ledger, RUN, 1)
    first = await journal.router_history("blog")
    assert [o.task_id for o in first] == ["a"]
    finish(journal, "succeeded", task_id="d", template="blog", alternative="slow")
    assert await journal.router_history("blog") == first  # read once, then kept
    assert [o.task_id for o in await journal.router_history("wiki")] == ["c"]
    assert ledger.reads == [
        {"template": "blog", "routed": True, "limit": ROUTER_HISTORY},
        {"template": "wiki", "routed": True, "limit": ROUTER_HISTORY},
    ]


async def test_without_a_budget_nothing_is_ever_overrun(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    finish(journal, "succeeded", metrics={"input_tokens": 1e9})
    journal.grant_budget("tok", "run:tokens", 5)  # no budget: nothing to grant to
    assert await journal.budget_overrun("draft", "t2", pending={"tokens": 1e9}) is None


async def test_a_budget_counts_what_this_attempt_used_and_what_gates_granted(
    ledger: MemoryLedger,
) -> None:
    journal = LedgerJournal(ledger, RUN, 1, budget=Budget(tokens=100))
    assert await journal.budget_overrun("draft", "t2") is None
    finish(journal, "succeeded", metrics={"input_tokens": 60, "output_tokens": 40})
    over = await journal.budget_overrun("draft", "t2")
    assert over is not None
    assert (over["scope"], over["measure"], over["used"], over["limit"]) == (
        "run",
        "tokens",
        100,
        100,
    )
    journal.grant_budget("tok", "run:tokens", 50)
    assert await journal.budget_overrun("draft", "t2") is None
    over = await journal.budget_overrun("draft", "t2", pending={"tokens": 50})
    assert over is not None and (over["used"], over["limit"]) == (150, 150)


async def test_a_retry_counts_what_earlier_attempts_spent(ledger: MemoryLedger) -> None:
    finish(LedgerJournal(ledger, RUN, 1), "failed", metrics={"cost": 0.75}, error="x")
    await ledger.flush()  # the first attempt committed it
    retry = LedgerJournal(ledger, RUN, 2, budget=Budget(cost=1.0))
    assert await retry.budget_overrun("draft", "t1") is None
    over = await retry.budget_overrun("draft", "t1", pending={"cost": 0.25})
    assert over is not None and (over["measure"], over["used"]) == ("cost", 1.0)


async def test_a_replayed_node_does_not_count_what_it_spent_before_it_waited(
    ledger: MemoryLedger,
) -> None:
    journal = LedgerJournal(ledger, RUN, 1, budget=Budget(tokens=100))
    finish(journal, "waiting", task_id="t1", metrics={"input_tokens": 100})
    assert await journal.budget_overrun("draft", "t1") is None  # it runs again from its start
    over = await journal.budget_overrun("draft", "t2")  # for any other node it is spent
    assert over is not None and over["used"] == 100


# -- stage log lines -------------------------------------------------------------------------


async def test_a_stage_event_keeps_what_the_stage_said(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    data = {"k": 1}
    journal.node_event(node="draft", kind="stage.log", level="warning", message="hm", data=data)
    journal.node_event(
        node="draft", kind="tool.use", level="info", message="ls", data={}, category="tool"
    )
    await ledger.flush()  # the step's commit
    log, tool = await ledger.events(RUN)
    assert (log.kind, log.node, log.level, log.message) == ("stage.log", "draft", "warning", "hm")
    assert (log.category, log.data) == (EventCategory.LOG, {"k": 1})
    assert (tool.kind, tool.category) == ("tool.use", EventCategory.TOOL)


# -- the side-effect journal -----------------------------------------------------------------


async def test_an_effect_runs_once_and_its_kept_result_is_returned_after(
    ledger: MemoryLedger,
) -> None:
    calls: list[str] = []

    def send() -> dict[str, Any]:
        calls.append("sent")
        return {"id": 7, "at": time.gmtime(0)[:3]}  # a tuple comes back as JSON keeps it

    journal = LedgerJournal(ledger, RUN, 2)
    first = await journal.effect(node="notify", key="mail", fn=send)
    assert first == {"id": 7, "at": [1970, 1, 1]}
    again = await LedgerJournal(ledger, RUN, 3).effect(node="notify", key="mail", fn=send)
    assert again == first and calls == ["sent"]
    kept = await ledger.get_effect(RUN, "notify", "mail")
    assert kept is not None and (kept.attempt, kept.result) == (2, first)
    [done] = await events(ledger, "effect.done")
    assert (done.node, done.message, done.level) == ("notify", "mail", "debug")
    assert done.category is EventCategory.LOG
    assert done.data == {"key": "mail", "attempt": 2}


async def test_an_async_effect_is_awaited_and_an_odd_result_kept_as_text(
    ledger: MemoryLedger,
) -> None:
    async def book() -> Any:
        return {"file": PurePosixPath("/tmp/booked")}

    result = await LedgerJournal(ledger, RUN, 1).effect(node="n", key="k", fn=book)
    assert result == {"file": "/tmp/booked"}
    kept = await ledger.get_effect(RUN, "n", "k")
    assert kept is not None and kept.result == result


async def test_effects_are_kept_per_node_and_key(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 1)
    assert await journal.effect(node="a", key="k", fn=lambda: 1) == 1
    assert await journal.effect(node="b", key="k", fn=lambda: 2) == 2
    assert await journal.effect(node="a", key="j", fn=lambda: 3) == 3


async def test_an_effect_that_raised_is_forgotten_and_runs_again(ledger: MemoryLedger) -> None:
    journal = LedgerJournal(ledger, RUN, 1)

    def broken() -> None:
        raise ConnectionError("down")

    with pytest.raises(ConnectionError):
        await journal.effect(node="n", key="k", fn=broken)
    assert await ledger.get_effect(RUN, "n", "k") is None
    assert await journal.effect(node="n", key="k", fn=lambda: "ok") == "ok"


async def test_an_effect_begun_and_never_finished_is_in_doubt(ledger: MemoryLedger) -> None:
    await ledger.begin_effect(Effect(run_id=RUN, node="n", key="k", attempt=1, started_at=0.0))
    calls: list[int] = []
    with pytest.raises(EffectInDoubt) as raised:
        await LedgerJournal(ledger, RUN, 2).effect(node="n", key="k", fn=lambda: calls.append(1))
    assert calls == []
    error = raised.value
    assert (error.run_id, error.node, error.key) == (RUN, "n", "k")
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(0.0))
    assert f"started at {started}" in str(error)
    # Idempotent: running it again is harmless, so it does.
    done = await LedgerJournal(ledger, RUN, 2).effect(
        node="n", key="k", fn=lambda: 5, idempotent=True
    )
    assert done == 5
    kept = await ledger.get_effect(RUN, "n", "k")
    assert kept is not None and kept.result == 5


class RacingLedger(MemoryLedger):
    """Another process begins (and maybe finishes) the effect between our read and begin."""

    def __init__(self, finished: bool) -> None:
        super().__init__()
        self.finished = finished

    async def begin_effect(self, effect: Effect) -> bool:
        await super().begin_effect(Effect(run_id=RUN, node=effect.node, key=effect.key, attempt=9))
        if self.finished:
            await self.finish_effect(RUN, effect.node, effect.key, "theirs")
        return await super().begin_effect(effect)


@pytest.mark.parametrize("finished", [True, False])
async def test_an_effect_another_process_began_first_is_theirs(finished: bool) -> None:
    ledger = RacingLedger(finished)
    await ledger.create_run(
        Run(run_id=RUN, template="t", template_version="1", status=RunStatus.RUNNING)
    )
    journal = LedgerJournal(ledger, RUN, 1)
    calls: list[int] = []
    if finished:
        assert await journal.effect(node="n", key="k", fn=lambda: calls.append(1)) == "theirs"
    else:
        with pytest.raises(EffectInDoubt):
            await journal.effect(node="n", key="k", fn=lambda: calls.append(1))
    assert calls == []


async def test_a_node_budget_counts_only_that_nodes_runs(ledger: MemoryLedger) -> None:
    budget = Budget(nodes={"draft": Budget(tokens=50)})
    journal = LedgerJournal(ledger, RUN, 1, budget=budget)
    finish(journal, "succeeded", node="draft", task_id="t1", metrics={"input_tokens": 50})
    finish(journal, "succeeded", node="review", task_id="t2", metrics={"input_tokens": 500})
    assert await journal.budget_overrun("review", "t3") is None  # no limit of its own
    over = await journal.budget_overrun("draft", "t4")
    assert over is not None and (over["scope"], over["used"]) == ("node:draft", 50)
