"""Gates and questions on a real SQLite file, each step through a fresh runner (as separate
commands would): rollback, a halt past the gate, retry without asking again."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import pytest

from stageline.config import Settings
from stageline.errors import AlreadyDecided
from stageline.ledger import RunStatus, WaitStatus
from stageline.runner import Runner
from stageline.runner._human import Decisions
from stageline.stages import StageContext, question_id
from stageline.templates import Template

BROKEN: set[str] = set()


class S(TypedDict, total=False):
    text: str
    feedback: str
    qa_history: list[dict[str, Any]]
    answers: dict[str, Any]
    shipped: bool


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": "draft"}


async def ship(state: S, ctx: StageContext) -> dict[str, Any]:
    if "ship" in BROKEN:
        raise RuntimeError("the shipping service is down")
    return {"shipped": True}


TEMPLATE = Template("sqlite_gate", state=S)
TEMPLATE.add_stage("write", write)
TEMPLATE.add_question("ask", questions=["Who is it for?"], answers_key="answers")
TEMPLATE.add_gate("approval", changes_to="write")
TEMPLATE.add_stage("ship", ship)
TEMPLATE.add_sequence("write", "ask", "approval", "ship")


@pytest.fixture(autouse=True)
def _reset() -> None:
    BROKEN.clear()


@pytest.fixture
def settings(tmp_path: Path, settings_for: Callable[[str], Settings]) -> Settings:
    return settings_for(f"sqlite:///{tmp_path / 'gates.db'}")


async def step(settings: Settings, action: Callable[[Runner], Any]) -> Any:
    """One command's worth: a fresh runner over the file, closed after."""
    async with Runner.open(settings) as runner:
        runner.load(TEMPLATE)
        return await action(runner)


def rows(settings: Settings, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    path = settings.database_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        found = db.execute(sql, args).fetchall()
    db.close()
    return found


async def to_gate(settings: Settings) -> str:
    first = await step(settings, lambda r: r.start(TEMPLATE, {}))
    run_id: str = first.run.run_id
    [asked] = first.waiting
    assert asked.wait_id == question_id(run_id, 0, node="ask") == asked.payload["question_id"]
    at_gate = await step(settings, lambda r: r.answer(run_id, {"q1": "editors"}))
    assert at_gate.status is RunStatus.WAITING and at_gate.waiting[0].name == "approval"
    history = rows(
        settings,
        "SELECT wait_id, status FROM stageline_waits WHERE run_id = ? AND kind = 'question'",
        run_id,
    )
    assert history == [(asked.wait_id, "applied")]
    assert at_gate.state["qa_history"][0]["question_id"] == asked.wait_id
    return run_id


async def test_a_resume_that_raises_first_rolls_back_and_the_run_waits_again(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_id = await to_gate(settings)

    async def approve_with_a_broken_checkpointer(runner: Runner) -> Any:
        saver = runner.backend.saver
        real, calls = saver.aget_tuple, []

        async def broken_once(config: Any) -> Any:
            calls.append(1)
            if len(calls) == 2:  # the first read checks the checkpoint; the second resumes
                raise sqlite3.OperationalError("disk I/O error")
            return await real(config)

        monkeypatch.setattr(saver, "aget_tuple", broken_once)
        return await runner.approve(run_id, actor="ann")

    after = await step(settings, approve_with_a_broken_checkpointer)
    assert after.status is RunStatus.WAITING
    got = rows(
        settings,
        "SELECT round, status, actor, reason FROM stageline_waits "
        "WHERE run_id = ? AND kind = 'gate' ORDER BY round",
        run_id,
    )
    assert [(r, s, a) for r, s, a, _ in got] == [(1, "rolled_back", "ann"), (2, "pending", None)]
    assert "disk I/O error" in got[0][3]
    kinds = [
        k
        for (k,) in rows(
            settings, "SELECT kind FROM stageline_events WHERE run_id = ? ORDER BY seq", run_id
        )
    ]
    assert kinds[-4:] == ["gate.decided", "run.resumed", "gate.rolled_back", "run.waiting"]
    done = await step(settings, lambda r: r.approve(run_id, actor="bob"))
    assert done.status is RunStatus.SUCCEEDED and done.state["shipped"] is True


async def test_a_halt_past_the_gate_keeps_the_decision_and_retry_does_not_ask_again(
    settings: Settings,
) -> None:
    run_id = await to_gate(settings)
    BROKEN.add("ship")
    failed = await step(settings, lambda r: r.approve(run_id, actor="ann"))
    assert failed.status is RunStatus.FAILED and failed.run.failed_node == "ship"
    [gate] = [
        w for w in (await step(settings, lambda r: r.status(run_id))).waits if w.name == "approval"
    ]
    assert gate.status is WaitStatus.APPLIED
    BROKEN.clear()
    retried = await step(settings, lambda r: r.retry(run_id))
    assert retried.status is RunStatus.SUCCEEDED and retried.run.attempt == 2
    nodes = [(r.node, r.attempt) for r in retried.records if r.attempt == 2]
    assert nodes == [("ship", 2)]  # neither the gate nor the question ran again
    assert len(rows(settings, "SELECT * FROM stageline_waits WHERE run_id = ?", run_id)) == 2


LOOP = Template("sqlite_gate_loop", state=S)
LOOP.add_stage("write", write)
LOOP.add_gate("approval", changes_to="write", max_changes=5)
LOOP.add_edge("write", "approval")


class ReadsBefore:
    """The ledger as a decider saw it before another process decided and advanced the run:
    its first reads of the run and its waits answer from then; everything else is the ledger."""

    def __init__(self, ledger: Any, run: Any, waits: list[Any]) -> None:
        self._ledger, self._stale = ledger, {"get_run": run, "waits": waits}

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._ledger, name)
        if name not in self._stale:
            return real

        async def read(*args: Any, **kwargs: Any) -> Any:
            stale = self._stale.pop(name, None)
            return stale if stale is not None else await real(*args, **kwargs)

        return read


async def test_a_decider_whose_reads_another_decision_overtook_hears_it_stands(
    settings: Settings,
) -> None:
    """A decider read the run and its waits at the gate's first visit; before it read the
    checkpoint, another process asked for changes and the run came back to the gate. The
    checkpoint (second visit) then disagrees with what it read: that is the ledger having moved,
    not a damaged checkpoint, so it hears that the first decision stands, and the new visit waits
    untouched."""
    async with Runner.open(settings) as runner:
        runner.load(LOOP)
        first = await runner.start(LOOP, {})
        run_id = first.run.run_id
        seen_at = first.waiting[0].requested_at
        run, waits = await runner.ledger.get_run(run_id), await runner.ledger.waits(run_id)
        again = await runner.decisions.decide(run_id, "changes", note="more", actor="first")
        assert again.status is RunStatus.WAITING and again.waiting[0].wait_id != waits[0].wait_id
        late = Decisions(
            ReadsBefore(runner.ledger, run, waits),  # type: ignore[arg-type]
            runner.graphs,
            runner.services,
            runner.advancer,
        )
        with pytest.raises(AlreadyDecided, match="first"):
            await late.decide(run_id, "approve", actor="late", seen_at=seen_at)
        [pending] = await runner.pending(run_id)
        assert pending.wait_id == again.waiting[0].wait_id and pending.status is WaitStatus.PENDING
