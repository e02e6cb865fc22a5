"""One commit per step, on each real database: a task's pending writes ride in the commit of the
checkpoint LangGraph saves right after it, unless a sibling still runs (then they are committed
at once), and a graph that stops short of a checkpoint has them committed before the runner
goes on. Rows are read back through a connection of their own, never through the saver."""

from __future__ import annotations

import asyncio
import operator
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Annotated, Any, TypedDict

import pytest

from raw_sql import raw_sql
from stageline.checkpoints import checkpoint_serde
from stageline.config import Settings
from stageline.ledger import Backend, NodeRecord, NodeStatus, Run, RunStatus, open_backend
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

CALLS: Counter[str] = Counter()
SEEN: dict[str, int] = {}


class S(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]


@pytest.fixture(autouse=True)
def _reset() -> None:
    CALLS.clear()
    SEEN.clear()


def _writes(url: str) -> int:
    return int(raw_sql(url, "SELECT count(*) FROM stageline_checkpoint_writes")[0][0])


@pytest.fixture
def backend(shared_backend: Backend) -> Backend:
    return shared_backend


CONF: Any = {"configurable": {"thread_id": "r1", "checkpoint_ns": "", "checkpoint_id": "c1"}}


def _record(status: NodeStatus, task: str = "t2") -> NodeRecord:
    return NodeRecord(
        run_id="r1",
        task_id=task,
        attempt=1,
        try_no=1,
        node=task,
        stage=task,
        status=status,
        started_at=1.0,
    )


async def test_writes_of_a_run_not_advanced_here_are_committed_at_once(
    backend: Backend,
) -> None:
    await backend.saver.aput_writes(CONF, [("n", 1)], "t1")
    assert _writes(backend.ledger.url) == 1


async def test_writes_wait_for_the_next_commit_while_nothing_else_runs(
    backend: Backend,
) -> None:
    ledger: Any = backend.ledger
    ledger.watch_cancel("r1", lambda: None)
    await backend.saver.aput_writes(CONF, [("n", 1)], "t1")
    assert _writes(ledger.url) == 0  # staged: the step's checkpoint carries them
    await ledger.flush()
    assert _writes(ledger.url) == 1


async def test_a_read_of_the_checkpoint_sees_writes_that_wait(backend: Backend) -> None:
    ledger: Any = backend.ledger
    ledger.watch_cancel("r1", lambda: None)
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    config = await backend.saver.aput(
        {"configurable": {"thread_id": "r1", "checkpoint_ns": ""}}, checkpoint, {"step": 1}, {}
    )
    await backend.saver.aput_writes(config, [("n", 1)], "t1")
    found = await backend.saver.aget_tuple(config)
    assert found is not None and found.pending_writes == [("t1", "n", 1)]
    assert _writes(ledger.url) == 1


async def test_writes_are_committed_at_once_while_a_sibling_runs(backend: Backend) -> None:
    ledger: Any = backend.ledger
    ledger.watch_cancel("r1", lambda: None)
    ledger.stage_node(_record(NodeStatus.RUNNING))
    ledger.stage_node(_record(NodeStatus.RUNNING, "t3"))
    await backend.saver.aput_writes(CONF, [("n", 1)], "t1")
    assert _writes(ledger.url) == 1  # a crash now must not re-run t1
    ledger.stage_node(_record(NodeStatus.SUCCEEDED))
    await backend.saver.aput_writes(CONF, [("n", 2)], "t2")
    assert _writes(ledger.url) == 2  # t3 still runs
    ledger.stage_node(_record(NodeStatus.SUCCEEDED, "t3"))
    await backend.saver.aput_writes(CONF, [("n", 3)], "t3")
    assert _writes(ledger.url) == 2  # the last one of the step waits for its checkpoint


async def test_a_checkpoint_commit_tells_each_watched_run_flagged_for_cancel(
    backend: Backend,
) -> None:
    """The commit reads every watched run's flag (one query for all of them, however many): the
    flagged ones are told, the others are not."""
    from langgraph.checkpoint.base import empty_checkpoint

    ledger: Any = backend.ledger
    told: list[str] = []
    ids = [f"watched-{i}" for i in range(5)]  # 5: not a power of two, the query is padded
    for run_id in ids:
        await ledger.create_run(
            Run(run_id=run_id, template="t", template_version="1+a", status=RunStatus.RUNNING)
        )
        ledger.watch_cancel(run_id, lambda run_id=run_id: told.append(run_id))
    await ledger.request_cancel(ids[1])
    await ledger.request_cancel(ids[4])
    config = {"configurable": {"thread_id": ids[0], "checkpoint_ns": ""}}
    await backend.saver.aput(config, empty_checkpoint(), {"step": 1}, {})
    assert sorted(told) == [ids[1], ids[4]]
    for run_id in ids:
        ledger.watch_cancel(run_id, None)


def _counting_commits(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """SQLite statements run by every connection opened from now on."""
    seen: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(seen.append)
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced)
    return seen


def chain(name: str, count: int) -> Template:
    template = Template(name, state=S)
    for i in range(count):

        async def body(state: S, ctx: StageContext) -> dict[str, Any]:
            return {"n": state.get("n", 0) + 1}

        template.add_stage(f"n{i}", body)
    return template.add_sequence(*[f"n{i}" for i in range(count)])


async def test_a_step_costs_one_commit_on_sqlite(
    sqlite_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen = _counting_commits(monkeypatch)
    template = chain("ten", 10)
    async with Runner.open(sqlite_settings) as runner:
        await runner.start(template, {"n": 0})  # warm: the schema, the graph
        seen.clear()
        summary = await runner.start(template, {"n": 0})
    assert summary.state["n"] == 10
    commits = sum(1 for s in seen if s.strip().upper() == "COMMIT")
    # 12 checkpoints (the input, one per node, the end), the run's creation and its end.
    assert commits == 12 + 2, seen


def fanout(slow_fails: bool) -> Template:
    """``a`` then ``fast`` and ``slow`` in parallel; ``slow`` finishes after ``fast``."""

    async def a(state: S, ctx: StageContext) -> dict[str, Any]:
        CALLS["a"] += 1
        return {"trail": ["a"]}

    async def fast(state: S, ctx: StageContext) -> dict[str, Any]:
        CALLS["fast"] += 1
        return {"trail": ["fast"]}

    async def slow(state: S, ctx: StageContext) -> dict[str, Any]:
        CALLS["slow"] += 1
        while CALLS["fast"] == 0:
            await asyncio.sleep(0.01)
        url = ctx.services["url"]
        deadline = asyncio.get_running_loop().time() + 30
        # The sibling's writes are committed while this node still runs.
        while not (found := _writes(url)) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        SEEN["writes_while_slow_ran"] = found
        if slow_fails and CALLS["slow"] == 1:
            raise RuntimeError("slow is broken")
        return {"trail": ["slow"]}

    template = Template(f"fan_{slow_fails}", state=S)
    template.add_stage("a", a)
    template.add_stage("fast", fast)
    template.add_stage("slow", slow)
    template.add_fanout("a", ["fast", "slow"])
    return template


@pytest.fixture
def project(shared_backend_url: str, settings_for: Callable[[str], Settings]) -> Iterator[Settings]:
    yield settings_for(shared_backend_url)


async def test_a_sibling_that_succeeded_beside_one_that_failed_is_not_run_again(
    project: Settings,
) -> None:
    template = fanout(slow_fails=True)
    services = {"url": project.database_url}
    async with Runner.open(project) as runner:
        failed = await runner.start(template, {}, services=services)
        assert failed.status is RunStatus.FAILED
        assert SEEN["writes_while_slow_ran"] >= 1
        # Before anything else looks: the finished sibling's writes are in the database.
        run_id = failed.run.run_id
        found = raw_sql(
            project.database_url,
            "SELECT count(*) FROM stageline_checkpoint_writes WHERE channel = 'trail'",
        )
        assert found[0][0] >= 1
        retried = await runner.retry(run_id, services=services)
    assert retried.status is RunStatus.SUCCEEDED
    assert dict(CALLS) == {"a": 1, "fast": 1, "slow": 2}
    assert sorted(retried.state["trail"]) == ["a", "fast", "slow"]


@pytest.mark.parametrize(("query", "level"), [("", 2), ("?synchronous=normal", 1)])
async def test_the_sqlite_synchronous_level_is_the_urls(
    sqlite_url: str, query: str, level: int
) -> None:
    opened = await open_backend(sqlite_url + query, checkpoint_serde())
    try:
        rows = await opened.ledger._x.fetch("PRAGMA synchronous", {})  # type: ignore[attr-defined]
    finally:
        await opened.aclose()
    assert list(rows[0].values()) == [level]


async def test_an_unknown_synchronous_level_in_the_url_is_refused(sqlite_url: str) -> None:
    from stageline.errors import ConfigError

    with pytest.raises(ConfigError, match="synchronous='off'"):
        await open_backend(sqlite_url + "?synchronous=off", checkpoint_serde())
