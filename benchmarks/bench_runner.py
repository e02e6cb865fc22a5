"""stageline vs raw LangGraph: a 10-node no-op graph, durability sync, per node.

Run: ``python benchmarks/bench_runner.py [--runs N] [--rounds R] [--postgres URL]``. Every engine
runs in this one process, interleaved round by round; the figures are medians over rounds, and
each ratio is the median of per-round ratios. On SQLite, stageline (full ledger) is set beside
raw LangGraph with its sync ``SqliteSaver`` and with ``AsyncSqliteSaver``, and two floors:
LangGraph's async loop alone (checkpoints in memory, ``InMemorySaver``) and one committed WAL
write per step; their sum is what no store on that loop can beat at ``synchronous=full``.
stageline runs at SQLite's ``synchronous=full`` (its default) and at ``normal``
(``sqlite_synchronous``), set beside ``SqliteSaver`` at its default (``FULL``) and at
``NORMAL``, for a like-for-like ratio. With ``--postgres`` (an empty database), stageline on
Postgres is set beside raw LangGraph with ``AsyncPostgresSaver``. Aims (issue 15): at most 0.5x
the sync ``SqliteSaver`` per node, at most 0.7x ``AsyncPostgresSaver``.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

import aiosqlite
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from stageline.checkpoints import checkpoint_serde
from stageline.config import load_settings
from stageline.runner import Runner
from stageline.templates import Template

NODES = 10
STEPS = NODES + 2  # LangGraph checkpoints the input and each node, plus the end


class State(TypedDict, total=False):
    n: int


def raw_graph(*, sync: bool = False) -> StateGraph[Any, Any, Any, Any]:
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    previous = START

    def bump(state: State) -> State:
        return {"n": state.get("n", 0) + 1}

    async def step(state: State) -> State:
        return bump(state)

    for i in range(NODES):
        graph.add_node(f"n{i}", bump if sync else step)
        graph.add_edge(previous, f"n{i}")
        previous = f"n{i}"
    graph.add_edge(previous, END)
    return graph


def stageline_template() -> Template:
    template = Template("bench", state=State)
    for i in range(NODES):

        async def step(state: State, ctx: Any) -> State:
            return {"n": state.get("n", 0) + 1}

        template.add_stage(f"n{i}", step)
    template.add_sequence(*[f"n{i}" for i in range(NODES)])
    return template


FULL = "stageline (SQLite, synchronous=full)"
NORMAL = "stageline (SQLite, synchronous=normal)"
SQLITE_SAVER = "LangGraph SqliteSaver (sync)"
SQLITE_SAVER_NORMAL = "LangGraph SqliteSaver (sync), NORMAL"
LOOP = "LangGraph InMemorySaver (async)"
COMMIT = "one WAL commit per step"

Engine = Callable[[str], Awaitable[None]]
"""One run of the 10-node graph, under the given thread id."""


async def _engines(folder: Path, postgres: str | None) -> tuple[dict[str, Engine], list[Any]]:
    """The engines to compare, and what to close afterwards."""
    serde = checkpoint_serde()
    closers: list[Any] = []

    sync_conn = sqlite3.connect(str(folder / "sync.db"), check_same_thread=False)
    closers.append(sync_conn.close)
    sync_graph = raw_graph(sync=True).compile(checkpointer=SqliteSaver(sync_conn, serde=serde))
    normal_conn = sqlite3.connect(str(folder / "sync_normal.db"), check_same_thread=False)
    normal_conn.execute("PRAGMA journal_mode=WAL")
    normal_conn.execute("PRAGMA synchronous=NORMAL")
    closers.append(normal_conn.close)
    normal_graph = raw_graph(sync=True).compile(checkpointer=SqliteSaver(normal_conn, serde=serde))

    memory_graph = raw_graph().compile(checkpointer=InMemorySaver(serde=serde))

    aconn = await aiosqlite.connect(str(folder / "async.db"))
    closers.append(aconn.close)
    async_graph = raw_graph().compile(checkpointer=AsyncSqliteSaver(aconn, serde=serde))

    floor = sqlite3.connect(str(folder / "floor.db"), isolation_level=None)
    floor.execute("PRAGMA journal_mode=WAL")
    floor.execute("PRAGMA synchronous=FULL")
    floor.execute("CREATE TABLE t (k INTEGER PRIMARY KEY, v BLOB)")
    closers.append(floor.close)

    async def raw_sync(thread: str) -> None:
        sync_graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")

    async def raw_sync_normal(thread: str) -> None:
        normal_graph.invoke({"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync")

    async def raw_async(thread: str) -> None:
        await async_graph.ainvoke(
            {"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync"
        )

    async def raw_memory(thread: str) -> None:
        await memory_graph.ainvoke(
            {"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync"
        )

    async def commit_floor(thread: str) -> None:
        for _ in range(STEPS):
            floor.execute("BEGIN")
            floor.execute("INSERT INTO t (v) VALUES (?)", (b"x" * 200,))
            floor.execute("COMMIT")

    template = stageline_template()

    async def on(url: str, home: Path) -> Engine:
        settings = load_settings(
            cwd=folder, env={"STAGELINE_HOME": str(home), "STAGELINE_DATABASE_URL": url}
        )
        opened = Runner.open(settings)
        runner = await opened.__aenter__()
        closers.append(lambda: opened.__aexit__(None, None, None))

        async def run(thread: str) -> None:
            summary = await runner.start(template, {"n": 0})
            assert summary.state["n"] == NODES, summary

        return run

    engines: dict[str, Engine] = {
        FULL: await on(f"sqlite:///{folder / 'stageline.db'}", folder / "h1"),
        NORMAL: await on(f"sqlite:///{folder / 'normal.db'}?synchronous=normal", folder / "h3"),
        SQLITE_SAVER: raw_sync,
        SQLITE_SAVER_NORMAL: raw_sync_normal,
        "LangGraph AsyncSqliteSaver": raw_async,
        LOOP: raw_memory,
        COMMIT: commit_floor,
    }
    if postgres:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
        from psycopg import AsyncConnection
        from psycopg.rows import dict_row

        # LangGraph's tables in a schema of their own: stageline refuses a database whose
        # current schema holds them (a database of the release before its own saver).
        setup = await AsyncConnection.connect(postgres, autocommit=True)
        await setup.execute("CREATE SCHEMA IF NOT EXISTS langgraph_raw")
        await setup.close()
        pconn = await AsyncConnection.connect(
            postgres,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options="-c search_path=langgraph_raw",
        )
        closers.append(pconn.close)
        psaver = AsyncPostgresSaver(pconn, serde=serde)
        await psaver.setup()
        pg_graph = raw_graph().compile(checkpointer=psaver)

        async def raw_pg(thread: str) -> None:
            await pg_graph.ainvoke(
                {"n": 0}, {"configurable": {"thread_id": thread}}, durability="sync"
            )

        engines["stageline (Postgres)"] = await on(postgres, folder / "h2")
        engines["LangGraph AsyncPostgresSaver"] = raw_pg
    return engines, closers


async def interleaved(
    sides: dict[str, Engine], rounds: int, runs: int, *, warm: int
) -> dict[str, list[float]]:
    """ms per call of each side, per round: ``warm`` calls of each first, then the sides
    interleaved round by round (so a change in the machine's load falls on all of them)."""
    per: dict[str, list[float]] = {name: [] for name in sides}
    for w in range(warm):
        for name, once in sides.items():
            await once(f"w{w}-{len(name)}")
    for r in range(rounds):
        for name, once in sides.items():
            started = time.perf_counter()
            for i in range(runs):
                await once(f"r{r}-{i}-{len(name)}")
            per[name].append((time.perf_counter() - started) * 1000 / runs)
    return per


async def main(runs: int, rounds: int, postgres: str | None = None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-"))
    engines, closers = await _engines(folder, postgres)
    try:
        per_run = await interleaved(engines, rounds, runs, warm=3)
        per_node = {name: [ms / NODES for ms in per] for name, per in per_run.items()}
    finally:
        for close in reversed(closers):
            done = close()
            if asyncio.iscoroutine(done):
                await done

    def ratio(ours: str, theirs: str) -> float:
        # Each round measures both engines back to back, so a busy moment on the machine slows
        # both sides of one ratio rather than one side of all.
        pairs = zip(per_node[ours], per_node[theirs], strict=True)
        return statistics.median(o / t for o, t in pairs)

    ratios = {
        "full vs SqliteSaver (sync), aim <= 0.5x": ratio(FULL, SQLITE_SAVER),
        "normal vs SqliteSaver (sync), aim <= 0.5x": ratio(NORMAL, SQLITE_SAVER),
        "normal vs SqliteSaver (sync) at NORMAL": ratio(NORMAL, SQLITE_SAVER_NORMAL),
        "full vs AsyncSqliteSaver": ratio(FULL, "LangGraph AsyncSqliteSaver"),
    }
    # What no store on LangGraph's async loop can beat at synchronous=full: the loop itself
    # (checkpoints kept in memory) plus one committed WAL write per step, each round's sum.
    floor = [m + c for m, c in zip(per_node[LOOP], per_node[COMMIT], strict=True)]
    floors = {
        "floor (async loop + one commit a step) vs SqliteSaver (sync)": statistics.median(
            f / t for f, t in zip(floor, per_node[SQLITE_SAVER], strict=True)
        )
    }
    if postgres:
        ratios["vs AsyncPostgresSaver, aim <= 0.7x"] = ratio(
            "stageline (Postgres)", "LangGraph AsyncPostgresSaver"
        )
    return {
        "ms_per_node": {name: statistics.median(v) for name, v in per_node.items()},
        "ratios": ratios,
        "floors": floors,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per round and engine")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--postgres", metavar="URL", help="an empty database to compare on too")
    args = parser.parse_args()
    result = asyncio.run(main(args.runs, args.rounds, args.postgres))
    print(f"10-node no-op graph, durability=sync, {args.rounds} rounds x {args.runs} runs")
    for name, ms in result["ms_per_node"].items():
        print(f"  {name:<40}: {ms:.3f} ms/node")
    for name, value in result["ratios"].items():
        print(f"  stageline {name:<44}: {value:.2f}x")
    for name, value in result["floors"].items():
        print(f"  {name}: {value:.2f}x")
