"""stageline's store, counted: commits per step, a worker's run against a foreground run, and a
gate round trip, each beside raw LangGraph measured in this same process.

Run: ``python benchmarks/bench_store.py [--rounds R] [--runs N] [--postgres URL]``.

- **Commits** (SQLite): every ``COMMIT`` the 10-node no-op run of ``bench_runner`` issues, seen
  through ``sqlite3``'s trace callback on every connection this process opens: stageline
  (full ledger, ``Runner.start``) against LangGraph's ``SqliteSaver``. Aim (issue 15): one
  commit per step.
- **Gate round trip**: ``a -> approval gate -> b``: run to the wait, decide (approve), finish.
  stageline (``Runner.start`` then ``Runner.approve``) against raw LangGraph (``interrupt()``,
  then ``Command(resume=...)``) with ``SqliteSaver`` and ``AsyncSqliteSaver`` (and, with
  ``--postgres``, ``AsyncPostgresSaver``). Interleaved rounds; medians, ratios are medians of
  per-round ratios. Aim: at most 1.3x raw. Commits per round trip are counted too.
- **Transactions of a run** (``--postgres``, an empty database): ``xact_commit`` of
  ``pg_stat_database`` before and after each measurement (every engine is closed at its end, so
  its connections report their counts), less a measurement of opening and closing the same
  engine with no run: raw LangGraph with ``AsyncPostgresSaver``; stageline in the foreground
  (``Runner.start``); stageline through the queue as ``stageline worker`` runs it
  (``Runner.create`` + ``defer_run``, then the worker's loop in this process until every run is
  done; the ledger reads that watch for the end are counted and taken off). Aim: a worker's
  run within 1.2x a foreground run's transactions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sqlite3
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiosqlite
from bench_runner import NODES, STEPS, State, interleaved, raw_graph, stageline_template
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from stageline.checkpoints import checkpoint_serde
from stageline.config import Settings, load_settings
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.templates import Template

_CONNECTIONS: list[sqlite3.Connection] = []
_connect = sqlite3.connect


def _tracked(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn = _connect(*args, **kwargs)
    _CONNECTIONS.append(conn)
    return conn


sqlite3.connect = _tracked  # type: ignore[assignment]  # this process's connections, counted


@contextlib.contextmanager
def sqlite_commits() -> Iterator[list[str]]:
    """The COMMITs every SQLite connection of this process runs inside the block."""
    seen: list[str] = []

    def trace(sql: str) -> None:
        if sql.strip().upper() == "COMMIT":
            seen.append(sql)

    for conn in _CONNECTIONS:
        with contextlib.suppress(sqlite3.ProgrammingError):  # closed
            conn.set_trace_callback(trace)
    try:
        yield seen
    finally:
        for conn in _CONNECTIONS:
            with contextlib.suppress(sqlite3.ProgrammingError):
                conn.set_trace_callback(None)


# -- the gate round trip ---------------------------------------------------------------------


def stageline_gated() -> Template:
    template = Template("bench_gate", state=State)

    async def step(state: State, ctx: Any) -> State:
        return {"n": state.get("n", 0) + 1}

    template.add_stage("a", step)
    template.add_gate("approval")
    template.add_stage("b", step)
    return template.add_sequence("a", "approval", "b")


def raw_gated(*, sync: bool = False) -> StateGraph[Any, Any, Any, Any]:
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)

    def bump(state: State) -> State:
        return {"n": state.get("n", 0) + 1}

    def gate(state: State) -> State:
        interrupt({"gate": "approval"})
        return {}

    async def abump(state: State) -> State:
        return bump(state)

    async def agate(state: State) -> State:
        return gate(state)

    graph.add_node("a", bump if sync else abump)
    graph.add_node("approval", gate if sync else agate)
    graph.add_node("b", bump if sync else abump)
    graph.add_edge(START, "a")
    graph.add_edge("a", "approval")
    graph.add_edge("approval", "b")
    graph.add_edge("b", END)
    return graph


RoundTrip = Callable[[str], Awaitable[None]]


def raw_round_trip(graph: Any, *, sync: bool) -> RoundTrip:
    async def once(thread: str) -> None:
        config = {"configurable": {"thread_id": thread}}
        if sync:
            graph.invoke({"n": 0}, config, durability="sync")
            done = graph.invoke(Command(resume={"approved": True}), config, durability="sync")
        else:
            await graph.ainvoke({"n": 0}, config, durability="sync")
            done = await graph.ainvoke(
                Command(resume={"approved": True}), config, durability="sync"
            )
        assert done["n"] == 2, done

    return once


def stageline_round_trip(runner: Runner) -> RoundTrip:
    template = stageline_gated()

    async def once(thread: str) -> None:
        waiting = await runner.start(template, {"n": 0})
        assert waiting.status is RunStatus.WAITING, waiting
        done = await runner.approve(waiting.run.run_id)
        assert done.status is RunStatus.SUCCEEDED and done.state["n"] == 2, done

    return once


def _settings(folder: Path, url: str, home: str) -> Settings:
    return load_settings(
        cwd=folder, env={"STAGELINE_HOME": str(folder / home), "STAGELINE_DATABASE_URL": url}
    )


@contextlib.asynccontextmanager
async def opened_runner(settings: Settings) -> AsyncIterator[Runner]:
    async with Runner.open(settings) as runner:
        yield runner


async def time_round_trips(
    sides: dict[str, RoundTrip], rounds: int, runs: int
) -> dict[str, list[float]]:
    """ms per round trip of each side, per round (sides interleaved round by round)."""
    return await interleaved(sides, rounds, runs, warm=2)


def ratio(per: dict[str, list[float]], ours: str, theirs: str) -> float:
    return statistics.median(o / t for o, t in zip(per[ours], per[theirs], strict=True))


# -- SQLite -----------------------------------------------------------------------------------


async def on_sqlite(folder: Path, rounds: int, runs: int) -> dict[str, Any]:
    serde = checkpoint_serde()
    out: dict[str, Any] = {}
    sync_conn = sqlite3.connect(str(folder / "raw.db"), check_same_thread=False)
    aconn = await aiosqlite.connect(str(folder / "raw_async.db"))
    try:
        saver = SqliteSaver(sync_conn, serde=serde)
        raw = raw_graph(sync=True).compile(checkpointer=saver)
        raw_gate = raw_gated(sync=True).compile(checkpointer=saver)
        araw_gate = raw_gated().compile(checkpointer=AsyncSqliteSaver(aconn, serde=serde))
        url = f"sqlite:///{folder / 'stageline.db'}"
        async with opened_runner(_settings(folder, url, "h")) as runner:
            template = stageline_template()
            await runner.start(template, {"n": 0})
            raw.invoke({"n": 0}, {"configurable": {"thread_id": "warm"}}, durability="sync")
            with sqlite_commits() as ours:
                await runner.start(template, {"n": 0})
            with sqlite_commits() as theirs:
                raw.invoke({"n": 0}, {"configurable": {"thread_id": "c"}}, durability="sync")
            out["commits per 10-node run"] = {"stageline": len(ours), "SqliteSaver": len(theirs)}
            out["commits per step (12 steps)"] = {
                "stageline": len(ours) / STEPS,
                "SqliteSaver": len(theirs) / STEPS,
            }

            sides = {
                "stageline": stageline_round_trip(runner),
                "SqliteSaver": raw_round_trip(raw_gate, sync=True),
                "AsyncSqliteSaver": raw_round_trip(araw_gate, sync=False),
            }
            counted: dict[str, int] = {}
            for name, once in sides.items():
                if name == "AsyncSqliteSaver":  # its connection lives on aiosqlite's thread
                    continue
                await once(f"count-warm-{name}")
                with sqlite_commits() as seen:
                    await once(f"count-{name}")
                counted[name] = len(seen)
            out["commits per gate round trip"] = counted
            per = await time_round_trips(sides, rounds, runs)
            out["gate round trip, ms"] = {k: statistics.median(v) for k, v in per.items()}
            out["gate round trip ratios (aim <= 1.3x)"] = {
                "vs SqliteSaver": ratio(per, "stageline", "SqliteSaver"),
                "vs AsyncSqliteSaver": ratio(per, "stageline", "AsyncSqliteSaver"),
            }
    finally:
        sync_conn.close()
        await aconn.close()
    return out


# -- Postgres ---------------------------------------------------------------------------------


class Transactions:
    """``xact_commit`` of one database, read over a connection to another one (so the reads
    are not counted), after the measured engine has closed its connections."""

    def __init__(self, url: str) -> None:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        info = conninfo_to_dict(url)
        self.db = str(info["dbname"])
        self.admin = make_conninfo(url, dbname="postgres")

    async def now(self) -> int:
        import psycopg

        await asyncio.sleep(0.5)  # closed connections report their counts as they exit
        async with await psycopg.AsyncConnection.connect(self.admin, autocommit=True) as conn:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            cur = await conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (self.db,)
            )
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def per_run(
        self, measure: Callable[[int], Awaitable[int]], runs: int
    ) -> tuple[float, int]:
        """(transactions per run, of opening and closing alone): ``measure(n)`` opens the
        engine, makes n runs, closes it and returns how many of its transactions to take off."""
        before = await self.now()
        taken = await measure(0)
        base = await self.now() - before - taken
        before = await self.now()
        taken = await measure(runs)
        total = await self.now() - before - taken
        return (total - base) / runs, base


async def on_postgres(folder: Path, url: str, rounds: int, runs: int) -> dict[str, Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row

    from stageline.worker import defer_run, ensure_queue_schema, queue_app, work_queue

    serde = checkpoint_serde()
    out: dict[str, Any] = {}
    settings = _settings(folder, url, "hp")
    setup = await AsyncConnection.connect(url, autocommit=True)
    await setup.execute("CREATE SCHEMA IF NOT EXISTS langgraph_raw")
    await setup.close()

    @contextlib.asynccontextmanager
    async def raw_saver() -> AsyncIterator[AsyncPostgresSaver]:
        conn = await AsyncConnection.connect(
            url,
            autocommit=True,
            prepare_threshold=0,
            row_factory=dict_row,
            options="-c search_path=langgraph_raw",
        )
        async with conn:
            saver = AsyncPostgresSaver(conn, serde=serde)
            yield saver

    async with raw_saver() as saver:
        await saver.setup()
    await ensure_queue_schema(url)

    # Transactions of one 10-node run.
    template = stageline_template()
    tx = Transactions(url)

    async def raw_runs(n: int) -> int:
        async with raw_saver() as saver:
            graph = raw_graph().compile(checkpointer=saver)
            for i in range(n):
                config = {"configurable": {"thread_id": f"tx-{time.time_ns()}-{i}"}}
                await graph.ainvoke({"n": 0}, config, durability="sync")
        return 0

    async def foreground_runs(n: int) -> int:
        async with opened_runner(settings) as runner:
            for _ in range(n):
                await runner.start(template, {"n": 0})
        return 0

    async def worker_runs(n: int) -> int:
        app = queue_app(url)
        looks = 0
        async with opened_runner(settings) as runner, app.open_async():
            runner.load(template)
            ids = []
            for _ in range(n):
                run = await runner.create(template, {"n": 0})
                await defer_run(app, run.run_id)
                ids.append(run.run_id)
            stopping = asyncio.Event()
            worker = asyncio.create_task(work_queue(app, runner, stopping))
            for run_id in ids:  # one read per look, taken off the count below
                while True:
                    looks += 1
                    if (await runner.ledger.get_run(run_id)).status is RunStatus.SUCCEEDED:
                        break
                    await asyncio.sleep(0.05)
            runner.drain("bench done")
            stopping.set()
            await worker
        return looks

    counts: dict[str, float] = {}
    for name, measure in (
        ("raw AsyncPostgresSaver", raw_runs),
        ("stageline foreground", foreground_runs),
        ("stageline worker", worker_runs),
    ):
        await measure(1)  # warm: schemas, prepared statements, imports
        counts[name], _ = await tx.per_run(measure, runs)
    out["transactions per 10-node run"] = counts
    out["worker / foreground (aim <= 1.2x)"] = (
        counts["stageline worker"] / counts["stageline foreground"]
    )

    # The gate round trip.
    async with raw_saver() as saver, opened_runner(settings) as runner:
        raw_gate = raw_gated().compile(checkpointer=saver)
        sides = {
            "stageline": stageline_round_trip(runner),
            "AsyncPostgresSaver": raw_round_trip(raw_gate, sync=False),
        }
        per = await time_round_trips(sides, rounds, runs)
    out["gate round trip, ms"] = {k: statistics.median(v) for k, v in per.items()}
    out["gate round trip ratio (aim <= 1.3x)"] = ratio(per, "stageline", "AsyncPostgresSaver")

    async def raw_gates(n: int) -> int:
        async with raw_saver() as saver:
            once = raw_round_trip(raw_gated().compile(checkpointer=saver), sync=False)
            for i in range(n):
                await once(f"gtx-{time.time_ns()}-{i}")
        return 0

    async def stageline_gates(n: int) -> int:
        async with opened_runner(settings) as runner:
            once = stageline_round_trip(runner)
            for i in range(n):
                await once(f"gtx-{i}")
        return 0

    out["transactions per gate round trip"] = {
        "stageline": (await tx.per_run(stageline_gates, runs))[0],
        "AsyncPostgresSaver": (await tx.per_run(raw_gates, runs))[0],
    }
    return out


async def main(rounds: int, runs: int, postgres: str | None) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-store-"))
    result = {"SQLite": await on_sqlite(folder, rounds, runs)}
    if postgres:
        result["Postgres"] = await on_postgres(folder, postgres, rounds, runs)
    return result


def _show(value: Any, indent: str = "  ") -> None:
    for key, item in value.items():
        if isinstance(item, dict):
            print(f"{indent}{key}:")
            _show(item, indent + "  ")
        elif isinstance(item, float):
            print(f"{indent}{key}: {item:.2f}")
        else:
            print(f"{indent}{key}: {item}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="runs per round and side")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--postgres", metavar="URL", help="an empty database to count on too")
    args = parser.parse_args()
    print(f"{NODES}-node no-op graph and a gate round trip, durability=sync")
    _show(asyncio.run(main(args.rounds, args.runs, args.postgres)))
