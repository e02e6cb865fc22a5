"""History and fork on a real SQLite file and on Postgres: a fork runs from its checkpoint with
changed state, records its lineage, and leaves the original as it was."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings
from stageline.errors import (
    InputError,
    InvalidTransition,
    RunNotFound,
    UsageError,
    WaitsForPerson,
)
from stageline.ledger import RunStatus
from stageline.runner import Runner, RunSummary

FLAKY = Path(__file__).parent.parent / "fixtures" / "flaky.py"
DRAFT_STEP = 3
"""blog_post: -1 input, 0 __start__, 1 research, 2 outline, 3 draft, 4 critics, ..."""


async def _finished_blog(runner: Runner, topic: str = "durable pipelines") -> RunSummary:
    waiting = await runner.start("blog_post", {"topic": topic})
    assert waiting.status is RunStatus.WAITING
    done = await runner.approve(waiting.run.run_id, note="fine", actor="ed")
    assert done.status is RunStatus.SUCCEEDED
    return done


async def _snapshot(runner: Runner, run_id: str) -> tuple[Any, ...]:
    summary = await runner.status(run_id)
    history = await runner.history(run_id)
    return (
        summary.run.status,
        summary.run.updated_at,
        summary.run.last_seq,
        [r.to_dict() for r in summary.records],
        summary.state,
        [w.to_dict() for w in summary.waits],
        [c.to_dict() for c in history],
        [e.to_dict() for e in await runner.ledger.events(run_id)],
    )


async def test_history_lists_every_checkpoint_with_its_writer_state_and_changes(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await _finished_blog(runner)
        history = await runner.history(done.run.run_id)
    steps = [(c.step, c.nodes, c.next) for c in history]
    assert steps[:5] == [
        (-1, [], ["__start__"]),
        (0, ["__start__"], ["research"]),
        (1, ["research"], ["outline"]),
        (2, ["outline"], ["draft"]),
        (3, ["draft"], ["critic_a", "critic_b"]),
    ]
    assert steps[4 + 1][1] == ["critic_a", "critic_b"]
    assert steps[-1] == (7, ["publish"], [])
    draft = history[4]
    assert set(draft.changed) == {"draft"} and draft.values["topic"] == "durable pipelines"
    assert draft.parent_id == history[3].checkpoint_id and draft.created_at > 0
    assert len({c.checkpoint_id for c in history}) == len(history)
    assert all("stageline_gates" not in c.values for c in history)  # reserved keys stay inside
    gate = next(c for c in history if c.next == ["editor_approval"])
    assert gate.values["score"] == done.state["score"]


async def test_fork_at_the_draft_step_with_a_new_topic_leaves_the_original_untouched(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await _finished_blog(runner)
        source = done.run.run_id
        before = await _snapshot(runner, source)

        fork = await runner.fork(
            source, at_step=DRAFT_STEP, changes={"topic": "gardening"}, fork_id="forked1"
        )
        assert fork.run.run_id == "forked1" and fork.status is RunStatus.WAITING
        nodes = [r.node for r in fork.records]
        assert nodes[0] == "draft" and "research" not in nodes and "outline" not in nodes
        assert fork.state["topic"] == "gardening"
        assert "Gardening" in fork.state["draft"] or "gardening" in fork.state["draft"]
        assert fork.state["research"] == done.state["research"]  # research was not re-run
        lineage = fork.lineage
        assert lineage is not None and lineage.parent_run_id == source
        assert lineage.parent_step == DRAFT_STEP
        assert lineage.parent_checkpoint_id == (await runner.history(source))[3].checkpoint_id

        # the fork has its own decisions, and finishes on its own
        finished = await runner.approve("forked1", actor="ed2")
        assert finished.status is RunStatus.SUCCEEDED
        assert [w.actor for w in (await runner.status("forked1")).waits] == ["ed2"]
        assert finished.state["post_path"] != done.state["post_path"]

        assert await _snapshot(runner, source) == before  # the original is untouched
        shown = await runner.status(source)
        assert [f.run_id for f in shown.forks] == ["forked1"] and shown.lineage is None
        assert (await runner.status("forked1")).to_dict()["lineage"]["forked_from"][
            "parent_run_id"
        ] == source
        forked_history = await runner.history("forked1")
        assert forked_history[0].source == "fork" and forked_history[0].nodes == ["outline"]
        assert {
            o.run_id
            for o in await runner.ledger.outcomes(template="blog_post")
            if o.node == "research"
        } == {source}


async def test_fork_left_queued_is_advanced_by_resume_from_its_checkpoint(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await _finished_blog(runner)
        queued = await runner.fork(done.run.run_id, at_step=7, advance=False)
        assert queued.status is RunStatus.QUEUED and queued.records == []
        finished = await runner.resume(queued.run.run_id)
    assert finished.status is RunStatus.SUCCEEDED
    assert [r.node for r in finished.records] == ["publish"]


async def test_fork_from_the_start_and_from_a_checkpoint_id(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await _finished_blog(runner)
        history = await runner.history(done.run.run_id)
        again = await runner.fork(done.run.run_id, at_step=0, changes={"topic": "x"})
        assert [r.node for r in again.records][:2] == ["research", "outline"]
        assert again.state["topic"] == "x"
        by_id = await runner.fork(done.run.run_id, checkpoint_id=history[5].checkpoint_id)
        assert by_id.records[0].node == "aggregate"
        assert by_id.lineage is not None and by_id.lineage.parent_step == 5


async def test_bad_forks_are_refused_and_leave_nothing_behind(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await _finished_blog(runner)
        rid = done.run.run_id
        with pytest.raises(InputError, match="no step 42"):
            await runner.fork(rid, at_step=42, fork_id="bad1")
        with pytest.raises(InputError, match="unknown input 'nope'"):
            await runner.fork(rid, at_step=3, changes={"nope": 1}, fork_id="bad2")
        with pytest.raises(InputError, match="no checkpoint"):
            await runner.fork(rid, checkpoint_id="not-a-checkpoint", fork_id="bad3")
        with pytest.raises(UsageError):
            await runner.fork(rid, at_step=3, checkpoint_id="x", fork_id="bad4")
        with pytest.raises(RunNotFound):
            await runner.fork("missing", at_step=3)
        with pytest.raises(UsageError):
            await runner.fork(rid, at_step=3, fork_id="../escape")
        for bad in ("bad1", "bad2", "bad3", "bad4"):
            with pytest.raises(RunNotFound):
                await runner.ledger.get_run(bad)
        assert (await runner.status(rid)).forks == []


async def test_update_state_of_a_waiting_run_is_refused_whatever_it_is_written_as(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    """Only a recorded decision moves a run past its gate: no edit, as no node."""
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        waiting = await runner.start("blog_post", {"topic": "t"})
        rid = waiting.run.run_id
        [old] = waiting.waiting
        before = await _snapshot(runner, rid)
        for as_node in (None, "editor_approval", "publish", "aggregate", "__end__"):
            with pytest.raises(WaitsForPerson, match="gate 'editor_approval'") as refused:
                await runner.update_state(rid, {"draft": "EDITED"}, as_node=as_node, actor="ed")
            assert refused.value.route == f"POST /v1/runs/{rid}/decide"
        with pytest.raises(WaitsForPerson):
            await runner.update_state(rid, {"nope": 1})
        assert await _snapshot(runner, rid) == before
        assert [w.wait_id for w in await runner.pending(rid)] == [old.wait_id]
        done = await runner.approve(rid, actor="ed", wait_id=old.wait_id)
        assert done.status is RunStatus.SUCCEEDED and done.state["draft"] != "EDITED"
        with pytest.raises(InvalidTransition, match="fork it instead"):
            await runner.update_state(rid, {"summary": "x"})


async def test_a_fork_with_changes_starts_before_the_gate_it_passed(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    """Changed state never lands past a gate in a fork: at the step after the gate, a fork takes
    no changes (it replays what was approved); before it, the fork asks again."""
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        done = await _finished_blog(runner)
        rid = done.run.run_id
        history = await runner.history(rid)
        at_gate = next(c for c in history if c.nodes == ["editor_approval"])
        with pytest.raises(InvalidTransition, match="without a recorded decision"):
            await runner.fork(rid, checkpoint_id=at_gate.checkpoint_id, changes={"draft": "X"})
        with pytest.raises(InvalidTransition, match="without a recorded decision"):
            await runner.fork(rid, at_step=at_gate.step + 1, changes={"draft": "X"})
        replayed = await runner.fork(rid, checkpoint_id=at_gate.checkpoint_id)
        assert replayed.status is RunStatus.SUCCEEDED
        assert replayed.state["draft"] == done.state["draft"]
        before_gate = next(c for c in history if c.next == ["editor_approval"])
        asks = await runner.fork(
            rid, checkpoint_id=before_gate.checkpoint_id, changes={"draft": "X"}
        )
        assert asks.status is RunStatus.WAITING and asks.state["draft"] == "X"
        assert [w.name for w in asks.waiting] == ["editor_approval"]


async def test_update_state_of_a_failed_run_then_retry_continues_from_it(
    settings_for: Callable[[str], Settings],
    shared_backend_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        failed = await runner.start(str(FLAKY), {"topic": "a"})
        rid = failed.run.run_id
        assert failed.status is RunStatus.FAILED
        with pytest.raises(InputError, match="as_node 'nope'"):
            await runner.update_state(rid, {"topic": "b"}, as_node="nope")
        with pytest.raises(InputError, match=f"^run {rid} has no checkpoint 'nope'$"):
            await runner.update_state(rid, {"topic": "b"}, checkpoint_id="nope")
        edited = await runner.update_state(rid, {"topic": "b"})
        assert edited.status is RunStatus.FAILED and edited.state["topic"] == "b"
        assert edited.run.lease_holder is None
        (tmp_path / "ok.flag").write_text("")
        done = await runner.retry(rid)
    assert done.status is RunStatus.SUCCEEDED and done.state == {"topic": "b", "done": True}
    assert [r.node for r in done.records].count("first") == 1


async def test_a_copy_keeps_the_whole_history_and_waits_for_its_own_decision(
    settings_for: Callable[[str], Settings], shared_backend_url: str
) -> None:
    async with Runner.open(settings_for(shared_backend_url)) as runner:
        waiting = await runner.start("blog_post", {"topic": "copies"})
        before = await _snapshot(runner, waiting.run.run_id)
        copy = await runner.copy(waiting.run.run_id)
        copy_id = copy.run.run_id
        assert copy.status is RunStatus.WAITING and copy.state == waiting.state
        assert [w.name for w in copy.waits] == ["editor_approval"]
        assert copy.waits[0].run_id == copy_id  # its own wait (the same interrupt id)
        history = await runner.history(waiting.run.run_id)
        assert [c.checkpoint_id for c in await runner.history(copy_id)] == [
            c.checkpoint_id for c in history
        ]
        assert copy.lineage is not None
        assert copy.lineage.parent_checkpoint_id == history[-1].checkpoint_id
        assert await _snapshot(runner, waiting.run.run_id) == before  # only read

        done = await runner.approve(copy_id, actor="ed")
        assert done.status is RunStatus.SUCCEEDED
        finished = await runner.copy(copy_id, copy_id="copy-of-done")
        assert finished.run.run_id == "copy-of-done"
        assert finished.status is RunStatus.SUCCEEDED and finished.state == done.state
        assert len(await runner.history(finished.run.run_id)) == len(await runner.history(copy_id))
        assert (await runner.status(waiting.run.run_id)).status is RunStatus.WAITING
