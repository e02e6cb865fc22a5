"""More of the runner's lifecycle on a real SQLite file: a retry from the inputs when no
checkpoint was saved, a retry that keeps its lease, a cancel that finds the run ended
meanwhile, a drain's default reason, and where a damaged checkpoint's message says the run
stands."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, TypedDict

import pytest

from stageline.config import Settings, with_overrides
from stageline.errors import (
    CheckpointCorrupt,
    InvalidTransition,
    StorageError,
    TemplateChanged,
)
from stageline.ledger import Run, RunStatus
from stageline.llm import OfflineModel
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template
from stageline.templates._park import add_park

TTL = 0.3
"""A short lease: renewed every 0.1 s while a step runs."""


class S(TypedDict, total=False):
    n: int
    text: str


async def write(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": f"n={state.get('n', 0)}"}


async def add(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


PLAIN = Template("lifecycle_more", state=S)
PLAIN.add_stage("write", write).add_stage("add", add)
PLAIN.add_sequence("write", "add")

GATED = Template("lifecycle_more_gate", state=S)
GATED.add_stage("write", write).add_stage("add", add).add_gate("approval")
GATED.add_sequence("write", "add", "approval")


@pytest.fixture
async def runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(sqlite_settings, deliver=False) as opened:
        yield opened


@pytest.fixture
async def short_lease_runner(sqlite_settings: Settings) -> AsyncIterator[Runner]:
    """Renews its leases every 0.1 s while a step runs (only where renewals are the point:
    under load a 0.3 s lease may lapse between two renewals)."""
    async with Runner.open(with_overrides(sqlite_settings, lease_ttl=TTL), deliver=False) as r:
        yield r


def damage_latest_checkpoint(database: Path, run_id: str) -> None:
    """Cut the run's latest checkpoint in half, as a damaged disk or a hand edit would."""
    with sqlite3.connect(database) as db:
        changed = db.execute(
            "UPDATE stageline_checkpoints SET checkpoint = substr(checkpoint, 1, "
            "length(checkpoint) / 2) WHERE thread_id = ? AND checkpoint_id = "
            "(SELECT max(checkpoint_id) FROM stageline_checkpoints WHERE thread_id = ?)",
            (run_id, run_id),
        ).rowcount
    assert changed == 1


async def test_a_started_run_waits_with_the_deadlines_it_was_given(runner: Runner) -> None:
    summary = await runner.start(GATED, {"n": 1}, deadlines={"approval": "45s"})
    assert summary.run.inputs["stageline_deadlines"] == {"approval": 45.0}
    [wait] = summary.waits
    assert wait.deadline_at == pytest.approx(wait.requested_at + 45)


async def test_a_run_that_waits_lists_only_its_own_waits(runner: Runner) -> None:
    first = await runner.start(GATED, {}, run_id="waits-own-1")
    second = await runner.start(GATED, {}, run_id="waits-own-2")
    assert [w.run_id for w in first.waits] == ["waits-own-1"]
    assert [w.run_id for w in second.waits] == ["waits-own-2"]


async def spend(state: S, ctx: StageContext) -> dict[str, Any]:
    ctx.metric("output_tokens", 100)
    return {"n": state.get("n", 0) + 1}


async def test_a_template_budget_holds_for_a_run_that_sets_none(runner: Runner) -> None:
    """The template's own token limit pauses the run at a budget gate before the node that
    would start past it (the run passed no budget of its own)."""
    template = Template("lifecycle_more_budget", state=S, budget={"tokens": 150})
    template.add_stage("a", spend).add_stage("b", spend).add_stage("c", spend)
    template.add_sequence("a", "b", "c")
    paused = await runner.start(template, {}, run_id="budgeted-1")
    assert paused.status is RunStatus.WAITING and paused.state["n"] == 2
    [wait] = paused.waits
    assert (wait.name, wait.node, wait.payload["budget"]["limit"]) == ("budget", "c", 150.0)


async def test_a_template_is_compiled_once_while_the_runner_keeps_it(runner: Runner) -> None:
    """``Runner.graph`` hands out the graph the runs use: one compiled graph per template
    object, reused (not rebuilt) for every run and every call."""
    graph = runner.graph(PLAIN)
    await runner.start(PLAIN, {}, run_id="compiled-once-1")
    assert runner.graph(PLAIN) is graph
    assert runner.graph("lifecycle_more") is graph  # by name: the object the runner was given
    other = Template("lifecycle_more", state=S).add_stage("write", write)
    assert runner.graph(other) is not graph


async def test_a_runner_uses_the_model_it_was_given(sqlite_settings: Settings) -> None:
    model = OfflineModel()
    async with Runner.open(sqlite_settings, deliver=False, model=model) as runner:
        assert runner.model is model


# -- retry ------------------------------------------------------------------------------------


async def test_a_failed_run_without_a_checkpoint_is_retried_from_its_inputs(
    runner: Runner,
) -> None:
    """A run can fail before its first checkpoint (a worker that could not start it): the
    retry starts it from the inputs it was created with."""
    run = await runner.create(PLAIN, {"n": 4}, run_id="no-checkpoint-1")
    await runner.ledger.transition(
        run.run_id, RunStatus.FAILED, expect=[RunStatus.QUEUED], error="could not start"
    )
    done = await runner.retry(run.run_id)
    assert (done.status, done.run.attempt) == (RunStatus.SUCCEEDED, 2)
    assert done.state == {"n": 5, "text": "n=4"}
    assert [(r.node, r.attempt) for r in done.records] == [("write", 2), ("add", 2)]


class Renewals:
    """The lease renewals the runner makes while a step waits for a few of them."""

    def __init__(self, runner: Runner) -> None:
        self.holders: list[str] = []
        self.results: list[Run | None] = []
        self.enough = asyncio.Event()
        self._renew = runner.ledger.renew_lease

    async def __call__(self, run_id: str, holder: str, ttl: float) -> Run | None:
        self.holders.append(holder)
        found = await self._renew(run_id, holder, ttl)
        self.results.append(found)
        if found is None or len(self.results) >= 2:
            self.enough.set()  # enough seen (or lost: the step need not wait any longer)
        return found


async def slow_once_failed(state: S, ctx: StageContext) -> dict[str, Any]:
    """Fails on the first attempt; on the retry runs until the lease was renewed twice."""
    if ctx.attempt == 1:
        raise ValueError("first attempt fails")
    await asyncio.wait_for(ctx.services["renewals"].enough.wait(), 30)
    return {"n": 1}


RETRIED = Template("lifecycle_more_retried", state=S).add_stage("slow", slow_once_failed)


async def test_a_retried_run_renews_the_lease_it_took(
    short_lease_runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    runner = short_lease_runner
    failed = await runner.start(RETRIED, {}, run_id="renewed-1")
    assert failed.status is RunStatus.FAILED and failed.run.failed_node == "slow"
    renewals = Renewals(runner)
    monkeypatch.setattr(runner.ledger, "renew_lease", renewals)
    done = await runner.retry("renewed-1", services={"renewals": renewals})
    assert done.status is RunStatus.SUCCEEDED and done.run.attempt == 2
    assert all(found is not None for found in renewals.results)
    [holder] = set(renewals.holders)
    assert holder and all(found and found.lease_holder == holder for found in renewals.results)
    assert done.run.lease_holder is None


async def test_a_run_goes_on_with_a_changed_template_only_when_forced(runner: Runner) -> None:
    """A queued run and a failed one, recorded on one version of the template, meet another
    version of the same name: refused unless forced; forced, they go on with the new one."""
    first = Template("lifecycle_more_changed", state=S).add_stage("write", write)
    queued = await runner.create(first, {"n": 1}, run_id="changed-queued-1")
    failed = await runner.create(first, {"n": 2}, run_id="changed-failed-1")
    await runner.ledger.transition(failed.run_id, RunStatus.FAILED, error="could not start")
    second = Template("lifecycle_more_changed", state=S).add_stage("write", write)
    second.add_stage("add", add).add_edge("write", "add")
    runner.load(second)  # the newest object of that name is the one the runner knows
    assert second.full_version != first.full_version
    with pytest.raises(TemplateChanged) as raised:
        await runner.resume(queued.run_id)
    assert (raised.value.recorded, raised.value.current) == (
        first.full_version,
        second.full_version,
    )
    assert str(raised.value).startswith(
        f"run changed-queued-1 started on template version {first.full_version}, "
    )
    with pytest.raises(TemplateChanged):
        await runner.retry(failed.run_id)
    for run_id in (queued.run_id, failed.run_id):
        assert "run.resumed" not in [e.kind for e in await runner.ledger.events(run_id)]
    resumed = await runner.resume(queued.run_id, force=True)
    retried = await runner.retry(failed.run_id, force=True)
    assert (resumed.status, resumed.state) == (RunStatus.SUCCEEDED, {"n": 2, "text": "n=1"})
    assert (retried.status, retried.state) == (RunStatus.SUCCEEDED, {"n": 3, "text": "n=2"})
    for done in (resumed, retried):
        assert done.run.template_version == second.full_version


async def test_a_built_in_template_goes_on_after_an_upgrade_that_kept_its_version(
    sqlite_settings: Settings,
) -> None:
    """A run of a built-in template recorded by an older stageline (same declared version,
    another digest) is resumed without --force, and goes on recorded on this one."""
    async with Runner.open(sqlite_settings, deliver=False, model=OfflineModel()) as runner:
        made = runner.load("blog_post")
        run = await runner.create("blog_post", {"topic": "upgrades"}, run_id="upgraded-1")
        older = f"{made.version}+000000000000"
        await runner.ledger.transition(
            run.run_id, RunStatus.QUEUED, expect=[RunStatus.QUEUED], template_version=older
        )
        resumed = await runner.resume(run.run_id)
        assert resumed.status is RunStatus.WAITING
        assert resumed.run.template_version == made.full_version != older


async def where_am_i(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": f"{ctx.run.template} {ctx.run_dir}"}


async def test_a_stage_knows_its_template_and_its_run_folder(
    runner: Runner, sqlite_settings: Settings
) -> None:
    template = Template("lifecycle_more_where", state=S).add_stage("where", where_am_i)
    done = await runner.start(template, {}, run_id="where-1")
    folder = sqlite_settings.home / "runs" / "where-1"
    assert done.state == {"text": f"lifecycle_more_where {folder}"}


async def test_every_event_of_a_run_is_published_once_in_order(runner: Runner) -> None:
    """What a live view (`stageline logs -f`, SSE) sees: the events as committed, each once,
    numbered without gaps, node events included (written with the step's checkpoint)."""
    published: list[Any] = []
    runner.ledger.publisher = published.extend
    done = await runner.start(PLAIN, {}, run_id="published-1")
    assert done.status is RunStatus.SUCCEEDED
    stored = await runner.ledger.events("published-1")
    assert [(e.seq, e.kind) for e in published] == [(e.seq, e.kind) for e in stored]
    assert [e.seq for e in stored] == list(range(1, len(stored) + 1))
    assert {"node.started", "node.succeeded", "run.succeeded"} <= {e.kind for e in stored}


async def from_services(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"text": ctx.services["greeting"]}


async def test_a_resumed_run_gets_the_services_it_is_given(runner: Runner) -> None:
    template = Template("lifecycle_more_services", state=S).add_stage("greet", from_services)
    queued = await runner.create(template, {}, run_id="services-1")
    done = await runner.resume(queued.run_id, services={"greeting": "hello"})
    assert (done.status, done.state) == (RunStatus.SUCCEEDED, {"text": "hello"})


CLASH_CALLS: Counter[str] = Counter()


async def first(state: S, ctx: StageContext) -> dict[str, Any]:
    CLASH_CALLS["first"] += 1
    return {"n": 1}


async def left(state: S, ctx: StageContext) -> dict[str, Any]:
    CLASH_CALLS["left"] += 1
    return {"text": "left"}


async def right(state: S, ctx: StageContext) -> dict[str, Any]:
    CLASH_CALLS["right"] += 1
    return {"text": "right"}


async def test_a_run_whose_parallel_stages_clashed_is_retried_from_its_checkpoint(
    runner: Runner,
) -> None:
    """Two parallel stages wrote one key without a reducer: the run fails with its state as
    before the clash, and a retry goes on from the checkpoint (the clash again), never
    from the inputs: the stage before the fan-out does not run again."""
    CLASH_CALLS.clear()
    clash = Template("lifecycle_more_clash", state=S)
    clash.add_stage("first", first).add_stage("left", left).add_stage("right", right)
    clash.add_fanout("first", ["left", "right"])
    failed = await runner.start(clash, {}, run_id="clash-1")
    assert failed.status is RunStatus.FAILED
    assert failed.run.error and "one state key that has no reducer" in failed.run.error
    assert (await runner.status("clash-1")).state == {"n": 1}
    again = await runner.retry("clash-1")
    assert (again.status, again.run.attempt) == (RunStatus.FAILED, 2)
    assert again.state == {"n": 1}
    assert CLASH_CALLS["first"] == 1
    assert [r.node for r in again.records if r.attempt == 2] == []


async def test_a_waiting_run_resumed_waits_again_at_the_same_gate(runner: Runner) -> None:
    """A resume of a waiting run (its checkpoint checked against the ledger's waits) asks
    nothing new: the run still waits on the one pending decision."""
    waiting = await runner.start(GATED, {"n": 1}, run_id="resumed-waiting-1")
    [wait] = waiting.waits
    again = await runner.resume("resumed-waiting-1")
    assert again.status is RunStatus.WAITING
    assert [(w.name, w.wait_id) for w in await runner.pending("resumed-waiting-1")] == [
        (wait.name, wait.wait_id)
    ]
    assert again.state == {"n": 2, "text": "n=1"}


TEMPLATE_FILE = """\
name: lifecycle_more_file
state:
  n: int
  text: str
stages:
  write: lifecycle_more_file_stages:write
start: write
"""


@pytest.mark.parametrize("how", ["create", "start"])
async def test_a_run_of_a_template_file_is_recorded_by_its_path(
    runner: Runner,
    sqlite_settings: Settings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    """A template given as a file is recorded by its absolute path, so another process (a
    worker, the next CLI command) finds it again."""
    (tmp_path / "lifecycle_more_file_stages.py").write_text(
        "async def write(state, ctx):\n    return {'text': f\"n={state.get('n', 0)}\"}\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "flows").mkdir()
    (tmp_path / "flows" / "t.yaml").write_text(TEMPLATE_FILE)
    monkeypatch.chdir(tmp_path)
    if how == "create":
        run = await runner.create("flows/t.yaml", {"n": 3}, run_id="from-file-1")
    else:
        runner.drain()  # recorded, then left queued for another process
        run = (await runner.start("flows/t.yaml", {"n": 3}, run_id="from-file-1")).run
    assert run.template == str(tmp_path / "flows" / "t.yaml")
    async with Runner.open(sqlite_settings, deliver=False) as other:
        done = await other.resume("from-file-1")
    assert (done.status, done.state) == (RunStatus.SUCCEEDED, {"n": 3, "text": "n=3"})


# -- cancel and drain -------------------------------------------------------------------------


async def test_a_cancel_does_not_overwrite_a_run_that_ended_meanwhile(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process finishes the run between the cancel's read and its write: the cancel
    is refused and the run keeps its ending."""
    run = await runner.create(PLAIN, {}, run_id="ended-meanwhile-1")
    read = runner.ledger.get_run

    async def finished_meanwhile(run_id: str) -> Run:
        seen = await read(run_id)
        await runner.ledger.transition(run_id, RunStatus.SUCCEEDED, expect=[RunStatus.QUEUED])
        return seen

    monkeypatch.setattr(runner.ledger, "get_run", finished_meanwhile)
    with pytest.raises(InvalidTransition, match="ended-meanwhile-1 is succeeded"):
        await runner.cancel(run.run_id)
    monkeypatch.undo()
    after = await runner.ledger.get_run(run.run_id)
    assert after.status is RunStatus.SUCCEEDED
    assert "run.cancelled" not in [e.kind for e in await runner.ledger.events(run.run_id)]


async def test_a_cancel_asked_while_a_step_runs_stops_the_run_after_that_step(
    runner: Runner,
) -> None:
    """`stageline cancel` from elsewhere while this process advances the run: the step in
    flight finishes, its checkpoint commit sees the flag, and no further step runs."""
    ran: list[str] = []

    async def asks_to_cancel(state: S, ctx: StageContext) -> dict[str, Any]:
        ran.append("first")
        asked = await ctx.services["runner"].cancel(ctx.run_id)
        assert asked.cancel_requested and asked.status is RunStatus.RUNNING
        return {"n": 1}

    async def never(state: S, ctx: StageContext) -> dict[str, Any]:
        ran.append("second")
        return {"n": 2}

    template = Template("lifecycle_more_cancelled", state=S)
    template.add_stage("first", asks_to_cancel).add_stage("second", never)
    template.add_edge("first", "second")
    done = await runner.start(template, {}, run_id="cancelled-1", services={"runner": runner})
    assert done.status is RunStatus.CANCELLED and ran == ["first"]
    assert done.state == {"n": 1}
    [said] = [e for e in await runner.ledger.events("cancelled-1") if e.kind == "run.cancelled"]
    # Stopped by the cancel between its steps, not ended some other way (an error) that the
    # cancel then won over.
    assert "before the run could end otherwise" not in said.message


async def test_a_drain_without_a_reason_says_shutdown(runner: Runner) -> None:
    assert runner.drain() == 0
    stopped = await runner.start(PLAIN, {}, run_id="drained-default-1")
    assert stopped.status is RunStatus.QUEUED
    drained = [e for e in await runner.ledger.events(stopped.run.run_id) if e.kind == "run.drained"]
    assert [e.message for e in drained] == ["shutdown"]


# -- damaged checkpoints ----------------------------------------------------------------------


async def test_a_damaged_checkpoint_is_reported_at_the_step_the_run_waits_at(
    runner: Runner, tmp_path: Path
) -> None:
    run_id = (await runner.start(GATED, {"n": 1}, run_id="damaged-wait-1")).run.run_id
    assert [r.node for r in await runner.ledger.node_records(run_id)] == [
        "write",
        "add",
        "approval",
    ]
    damage_latest_checkpoint(tmp_path / "stageline.db", run_id)
    shown = await runner.status(run_id)
    assert shown.status is RunStatus.WAITING and shown.state == {}
    assert shown.checkpoint_error is not None
    assert "run damaged-wait-1 at step 'approval'" in shown.checkpoint_error
    with pytest.raises(CheckpointCorrupt) as raised:
        await runner.resume(run_id)
    assert (raised.value.run_id, raised.value.step) == (run_id, "approval")
    assert (await runner.ledger.get_run(run_id)).status is RunStatus.WAITING


async def test_a_queued_run_whose_checkpoint_is_damaged_stays_queued(
    runner: Runner, sqlite_settings: Settings, tmp_path: Path
) -> None:
    """The claim comes first (it looks for the checkpoint in its own transaction): the read
    that finds the damage puts the run back as it was found, its lease given up."""
    runner.drain()  # the run stops after its first checkpoint, queued for another process
    stopped = await runner.start(PLAIN, {}, run_id="damaged-queued-1")
    assert stopped.status is RunStatus.QUEUED
    damage_latest_checkpoint(tmp_path / "stageline.db", "damaged-queued-1")
    async with Runner.open(sqlite_settings, deliver=False) as other:
        other.load(PLAIN)
        with pytest.raises(CheckpointCorrupt) as raised:
            await other.resume("damaged-queued-1")
    assert raised.value.run_id == "damaged-queued-1"
    after = await runner.ledger.get_run("damaged-queued-1")
    assert (after.status, after.lease_holder) == (RunStatus.QUEUED, None)


async def test_a_damaged_checkpoint_of_a_failed_run_is_reported_at_its_failed_node(
    runner: Runner, tmp_path: Path
) -> None:
    run = (await runner.start(RETRIED, {}, run_id="damaged-failed-1")).run
    assert run.status is RunStatus.FAILED
    damage_latest_checkpoint(tmp_path / "stageline.db", run.run_id)
    with pytest.raises(CheckpointCorrupt) as raised:
        await runner.retry(run.run_id)
    assert (raised.value.run_id, raised.value.step) == (run.run_id, "slow")
    after = await runner.ledger.get_run(run.run_id)
    assert (after.status, after.attempt) == (RunStatus.FAILED, 1)


async def test_a_damaged_checkpoint_of_a_stopped_run_is_reported_at_its_latest_node(
    runner: Runner, tmp_path: Path
) -> None:
    """A run stopped midway (its process gone) and resumed: the message names the latest node
    the ledger recorded for it (the stuck one, or the one before if its record never landed)."""
    entered, never = asyncio.Event(), asyncio.Event()

    async def stuck(state: S, ctx: StageContext) -> dict[str, Any]:
        entered.set()
        await never.wait()
        return {}

    template = Template("lifecycle_more_stuck", state=S)
    template.add_stage("write", write).add_stage("stuck", stuck).add_edge("write", "stuck")
    advance = asyncio.create_task(runner.start(template, {}, run_id="damaged-stopped-1"))
    await entered.wait()
    advance.cancel()
    with pytest.raises(asyncio.CancelledError):
        await advance
    damage_latest_checkpoint(tmp_path / "stageline.db", "damaged-stopped-1")
    with pytest.raises(CheckpointCorrupt) as raised:
        await runner.resume("damaged-stopped-1")
    assert raised.value.run_id == "damaged-stopped-1"
    recorded = [r.node for r in await runner.ledger.node_records("damaged-stopped-1")]
    assert raised.value.step == recorded[-1] and raised.value.step in ("write", "stuck")


async def test_a_run_whose_end_was_not_recorded_ends_on_resume_without_running_again(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database failed as the run's end was being recorded (after its last checkpoint):
    a resume records the end from the checkpoint and runs no stage again."""
    calls: list[str] = []

    async def counted(state: S, ctx: StageContext) -> dict[str, Any]:
        calls.append(ctx.run_id)
        return {"n": state.get("n", 0) + 1}

    template = Template("lifecycle_more_unrecorded", state=S).add_stage("count", counted)
    transition = runner.ledger.transition

    async def failing_at_the_end(run_id: str, status: RunStatus, **kwargs: Any) -> Run:
        if status is RunStatus.SUCCEEDED:
            raise StorageError("database is gone")
        return await transition(run_id, status, **kwargs)

    monkeypatch.setattr(runner.ledger, "transition", failing_at_the_end)
    with pytest.raises(StorageError):
        await runner.start(template, {"n": 1}, run_id="unrecorded-1")
    monkeypatch.undo()
    assert (await runner.ledger.get_run("unrecorded-1")).status is RunStatus.RUNNING
    done = await runner.resume("unrecorded-1")
    assert (done.status, done.state) == (RunStatus.SUCCEEDED, {"n": 2})
    assert calls == ["unrecorded-1"]


async def rework(state: S, ctx: StageContext) -> dict[str, Any]:
    return {"n": state.get("n", 0) + 1}


async def test_a_run_taken_over_says_where_its_work_is(
    runner: Runner, sqlite_settings: Settings
) -> None:
    """A parked run whose operation left a worktree: taken over, it ends saying which branch
    and worktree hold the work (the person goes on there)."""
    template = Template("lifecycle_more_parked", state=S).add_stage("work", rework)
    template.add_route("work", lambda s: "again", {"again": "work"})
    template.add_loop("rounds", head="work", max_iterations=2, on_exhausted="more")
    add_park(template, "more", loop="rounds", head="work", rounds=1)
    parked = await runner.start(template, {}, run_id="parked-1")
    assert parked.status is RunStatus.PARKED
    run_dir = sqlite_settings.run_dir("parked-1")
    (run_dir / "worktree").mkdir(parents=True)
    (run_dir / "worktree.json").write_text(
        '{"checkout": "/src/app", "branch": "stageline/parked-1", "made_branch": true}'
    )
    taken = await runner.take_over("parked-1", gate="more", actor="ann")
    assert taken.status is RunStatus.TAKEN_OVER
    [said] = [e for e in await runner.ledger.events("parked-1") if e.kind == "run.taken_over"]
    where = (
        f"on branch stageline/parked-1 in worktree {(run_dir / 'worktree').resolve()} "
        "(of checkout /src/app)"
    )
    assert said.data == {"where": where}
    assert said.message == f"taken over at gate 'more' by ann; the work is {where}"


async def test_a_storage_error_at_the_end_is_what_the_caller_hears(
    runner: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database fails as the run's end is recorded, and again as the lease is given back:
    the caller hears the first failure, not the second."""
    transition = runner.ledger.transition

    async def failing_at_the_end(run_id: str, status: RunStatus, **kwargs: Any) -> Run:
        if status is RunStatus.SUCCEEDED:
            raise StorageError("database is gone")
        return await transition(run_id, status, **kwargs)

    async def release_fails(run_id: str, holder: str) -> None:
        raise StorageError("database is still gone")

    monkeypatch.setattr(runner.ledger, "transition", failing_at_the_end)
    monkeypatch.setattr(runner.ledger, "release_lease", release_fails)
    with pytest.raises(StorageError, match="database is gone"):
        await runner.start(PLAIN, {}, run_id="gone-1")
