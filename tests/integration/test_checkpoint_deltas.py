"""Checkpoint bytes that do not grow with the run: a list grown by a reducer is stored as what
each step appended, and reads back whole and exact at every step, on SQLite and Postgres."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from sqlalchemy import func, select

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import Backend, copy_database, open_backend
from stageline.ledger._checkpoint_read import latest_checkpoint
from stageline.ledger._deltas import DELTA, FANOUT, chain_query
from stageline.ledger._schema import checkpoint_blobs, checkpoint_writes, checkpoints

ITEM = 256


@pytest.fixture
def backend(shared_backend: Backend) -> Backend:
    return shared_backend


async def _fetch(backend: Backend, stmt: Any) -> list[dict[str, Any]]:
    ledger: Any = backend.ledger
    compiled = stmt.compile(dialect=ledger._x.dialect)
    async with ledger._read() as x:
        rows: list[dict[str, Any]] = await x.fetch(str(compiled), compiled.params)
    return rows


async def stored_bytes(backend: Backend) -> int:
    """Bytes in the binary columns of the checkpoint tables."""
    sizes = [
        func.coalesce(func.sum(func.length(checkpoints.c.checkpoint)), 0),
        func.coalesce(func.sum(func.length(checkpoints.c.metadata)), 0),
    ]
    total = 0
    for stmt in (
        select(*sizes),
        select(func.coalesce(func.sum(func.length(checkpoint_writes.c.value)), 0)),
        select(func.coalesce(func.sum(func.length(checkpoint_blobs.c.blob)), 0)),
    ):
        total += sum(int(v) for v in (await _fetch(backend, stmt))[0].values())
    return total


def item(n: int) -> str:
    return f"{n:08d}".ljust(ITEM, "x")


class Writer:
    """Puts checkpoints one after another on a thread, as LangGraph's loop does."""

    def __init__(self, backend: Backend, thread: str = "r1") -> None:
        self.saver, self.thread = backend.saver, thread
        self.parent: str | None = None
        self.number = 0
        self.configs: list[Any] = []

    async def put(self, **values: Any) -> Any:
        self.number += 1
        checkpoint = empty_checkpoint()
        version = f"{self.number:032}.0"
        checkpoint["channel_values"] = values
        checkpoint["channel_versions"] = dict.fromkeys(values, version)
        conf: dict[str, Any] = {"thread_id": self.thread, "checkpoint_ns": ""}
        if self.parent:
            conf["checkpoint_id"] = self.parent
        new_versions = dict.fromkeys(values, version)
        metadata: Any = {"step": self.number, "source": "loop", "parents": {}}
        stored = await self.saver.aput({"configurable": conf}, checkpoint, metadata, new_versions)
        self.parent = stored["configurable"]["checkpoint_id"]
        self.configs.append(stored)
        return stored


async def read_items(backend: Backend, config: Any) -> Any:
    saved = await backend.saver.aget_tuple(config)
    assert saved is not None
    return saved.checkpoint["channel_values"]["items"]


async def test_bytes_per_step_stay_flat_over_1000_steps(backend: Backend) -> None:
    writer, items = Writer(backend), []
    added: dict[int, int] = {}
    totals: dict[int, int] = {}
    for step in range(1, 1001):
        items = [*items, item(step)]  # a new list each step, as operator.add makes
        before = await stored_bytes(backend) if step in (1, 2, 100, 1000) else 0
        await writer.put(items=items, n=step)
        if step in (1, 2, 100, 1000):
            added[step] = await stored_bytes(backend) - before
        if step in (500, 1000):
            totals[step] = await stored_bytes(backend)
    # The same bytes at step 1,000 as at step 2 (a few more for the item count): the item and
    # the checkpoint row. Step 1 stores the list whole, one item then.
    assert added[1000] - added[2] <= 8, added
    assert added[100] - added[2] <= 8, added
    assert added[2] < 3 * ITEM, added
    # Linear in the run's length, not quadratic: 1,000 steps cost twice what 500 do, and the
    # merged deltas (every item once more per level) stay within a small factor of the items.
    assert totals[1000] <= 2.1 * totals[500], totals
    assert totals[1000] <= 4 * 1000 * ITEM, totals
    assert await read_items(backend, writer.configs[-1]) == items
    rows = await _fetch(backend, select(checkpoint_blobs.c.type))
    assert sum(r["type"] == DELTA for r in rows) >= 990
    # A read follows a short chain: deltas merge, 32 to one, so at step 1,000 the list is one
    # whole row and at most 31 merged deltas and 31 single ones.
    stmt, params = chain_query("r1", "", {"items": f"{1000:032}.0"})
    ledger: Any = backend.ledger
    async with ledger._read() as x:
        chain = await x.fetch(ledger._sql(stmt), params)
    assert len(chain) <= 1 + 2 * (FANOUT - 1), len(chain)


async def test_every_step_reads_back_whole_and_exact(backend: Backend) -> None:
    writer, expected, items = Writer(backend), [], []
    for step in range(1, 3 * FANOUT + 10):
        items = [*items, item(step)]
        await writer.put(items=items)
        expected.append(list(items))
    for config, want in zip(writer.configs, expected, strict=True):
        assert await read_items(backend, config) == want
    listed = [t.checkpoint["channel_values"]["items"] async for t in backend.saver.alist(None)]
    assert listed == expected[::-1]


async def test_a_list_that_shrinks_or_is_replaced_is_stored_whole(backend: Backend) -> None:
    writer = Writer(backend)
    a, b = item(1), item(2)
    steps: list[list[Any]] = [
        [a],
        [a, b],
        [a],  # shrank
        [b, a],  # replaced, longer
        [b, a, b],
        [1],
        [True, 2],  # equal to [1, ...] at the front, but not the same value
        [True, 2, 3],
        [],
        [a],
    ]
    for value in steps:
        await writer.put(items=value)
    for config, want in zip(writer.configs, steps, strict=True):
        got = await read_items(backend, config)
        assert got == want and [type(v) for v in got] == [type(v) for v in want]


async def test_a_fork_and_a_new_saver_store_whole_and_read_exact(
    backend: Backend, shared_backend_url: str
) -> None:
    writer = Writer(backend)
    for step in range(1, 6):
        await writer.put(items=[item(i) for i in range(1, step + 1)])
    fork = Writer(backend)
    fork.number, fork.parent = 10, writer.configs[1]["configurable"]["checkpoint_id"]
    forked = await fork.put(items=[item(1), item(2), item(99)])
    assert await read_items(backend, forked) == [item(1), item(2), item(99)]
    assert await read_items(backend, writer.configs[-1]) == [item(i) for i in range(1, 6)]
    other = await open_backend(shared_backend_url, checkpoint_serde())  # another process
    try:
        later = Writer(other)
        later.number, later.parent = 20, writer.parent
        stored = await later.put(items=[item(i) for i in range(1, 7)])
        assert await read_items(other, stored) == [item(i) for i in range(1, 7)]
    finally:
        await other.aclose()


async def test_a_deleted_thread_leaves_other_threads_and_starts_afresh(
    backend: Backend, shared_backend_url: str
) -> None:
    kept, dropped = Writer(backend, "kept"), Writer(backend, "dropped")
    for step in range(1, 40):
        await kept.put(items=[item(i) for i in range(step)])
        await dropped.put(items=[item(i) for i in range(step)])
    other = await open_backend(
        shared_backend_url, checkpoint_serde()
    )  # deleted from another process
    try:
        await other.saver.adelete_thread("dropped")
    finally:
        await other.aclose()
    left = await _fetch(backend, select(checkpoint_blobs.c.thread_id).distinct())
    assert [r["thread_id"] for r in left] == ["kept"]
    again = Writer(backend, "dropped")
    await again.put(items=[item(1)])
    await again.put(items=[item(1), item(2)])
    assert await read_items(backend, again.configs[-1]) == [item(1), item(2)]
    assert await read_items(backend, kept.configs[-1]) == [item(i) for i in range(39)]


async def test_shows_reader_rebuilds_the_list_without_langgraph(backend: Backend) -> None:
    writer = Writer(backend)
    for step in range(1, 50):
        await writer.put(items=[f"i{i}" for i in range(step)], n=step)
    saved = await latest_checkpoint(backend.ledger, "r1")
    assert saved is not None
    assert saved.channel_values == {"items": [f"i{i}" for i in range(49)], "n": 49}


class State(TypedDict):
    items: Annotated[list[str], operator.add]
    n: int


def _loop(until: int) -> StateGraph[Any, Any, Any, Any]:
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)

    async def add(state: State) -> dict[str, Any]:
        return {"items": [item(state["n"] + 1)], "n": state["n"] + 1}

    graph.add_node("add", add)
    graph.add_edge(START, "add")
    graph.add_conditional_edges("add", lambda s: END if s["n"] >= until else "add")
    return graph


async def test_a_graph_run_resumed_by_a_new_process_reads_back_exact(
    shared_backend_url: str,
) -> None:
    config: Any = {"configurable": {"thread_id": "g1"}, "recursion_limit": 200}
    first = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        graph = _loop(60).compile(checkpointer=first.saver)
        await graph.ainvoke({"items": [], "n": 0}, config, durability="sync")
    finally:
        await first.aclose()
    second = await open_backend(shared_backend_url, checkpoint_serde())
    try:
        graph = _loop(120).compile(checkpointer=second.saver)
        await graph.aupdate_state(config, {"n": 60})
        done = await graph.ainvoke(None, config, durability="sync")
        assert done["items"] == [item(i) for i in range(1, 121)]
        history = [s async for s in graph.aget_state_history(config)]
        for snapshot in history:
            n = snapshot.values.get("n", 0)
            assert snapshot.values.get("items", []) == [item(i) for i in range(1, n + 1)]
        rows = await _fetch(second, select(checkpoint_blobs.c.type))
        assert sum(r["type"] == DELTA for r in rows) > 100
    finally:
        await second.aclose()


async def test_db_copy_carries_the_deltas(tmp_path: Path, postgres_url: str) -> None:
    source_url = f"sqlite:///{tmp_path / 's.db'}"
    source = await open_backend(source_url, checkpoint_serde())
    try:
        writer = Writer(source)
        for step in range(1, 80):
            await writer.put(items=[item(i) for i in range(step)])
        configs = writer.configs
    finally:
        await source.aclose()
    await copy_database(source_url, postgres_url)
    target = await open_backend(postgres_url, checkpoint_serde())
    try:
        for step, config in enumerate(configs, start=1):
            assert await read_items(target, config) == [item(i) for i in range(step)]
    finally:
        await target.aclose()


async def test_a_checkpoint_written_before_migration_12_reads_back(backend: Backend) -> None:
    """Rows of the first own-store release held every value in the checkpoint row itself."""
    from sqlalchemy import delete, update

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"items": ["a", "b"], "n": 2}
    checkpoint["channel_versions"] = {"items": "2", "n": "2", "branch:to:n": "1"}
    kind, blob = backend.saver.serde.dumps_typed(checkpoint)
    stored = await Writer(backend).put(items=["x"], n=1)
    ledger: Any = backend.ledger
    async with ledger._tx() as x:
        for stmt in (
            update(checkpoints).values(type=kind, checkpoint=blob),
            delete(checkpoint_blobs),
        ):
            compiled = stmt.compile(dialect=ledger._x.dialect)
            await x.execute(str(compiled), compiled.params)
    saved = await backend.saver.aget_tuple(stored)
    assert saved is not None
    assert saved.checkpoint["channel_values"] == {"items": ["a", "b"], "n": 2}
    shown = await latest_checkpoint(backend.ledger, "r1")
    assert shown is not None and shown.channel_values == {"items": ["a", "b"], "n": 2}
