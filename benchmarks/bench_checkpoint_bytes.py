"""Checkpoint bytes per step of a run whose state list grows by a reducer.

Run: ``python benchmarks/bench_checkpoint_bytes.py [--steps N] [--item-bytes B] [--postgres URL]``.
A one-node LangGraph loop (``Annotated[list, operator.add]``, one item of B bytes appended per
step, durability sync) runs N steps over stageline's saver; after each step the bytes stored in
the checkpoint tables (every binary column: checkpoints, their metadata, pending writes, channel
values) are summed. Printed: the bytes a step added at a few steps, their median, the largest
(a step that merges deltas writes more, see ``stageline.ledger._deltas``), and the total. Bytes,
not time: the figure is the same on every machine. With ``--postgres URL`` (a database to make
scratch databases on) it runs on Postgres too.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import operator
import statistics
import tempfile
import uuid
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from sqlalchemy import func, select

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import open_backend
from stageline.ledger._schema import metadata
from stageline.ledger._sql import SqlLedger

SHOWN = (1, 2, 10, 100, 1000)


class State(TypedDict):
    items: Annotated[list[str], operator.add]
    n: int


def loop_graph(steps: int, item_bytes: int) -> StateGraph[Any, Any, Any, Any]:
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)

    async def add(state: State) -> dict[str, Any]:
        n = state["n"] + 1
        return {"items": [f"{n:08d}".ljust(item_bytes, "x")], "n": n}

    graph.add_node("add", add)
    graph.add_edge(START, "add")
    graph.add_conditional_edges("add", lambda s: END if s["n"] >= steps else "add")
    return graph


async def stored_bytes(ledger: SqlLedger) -> int:
    """Bytes in every binary column of the checkpoint tables."""
    total = 0
    for table in metadata.sorted_tables:
        if not table.name.startswith("stageline_checkpoint"):
            continue
        binary = [c for c in table.columns if c.type.python_type is bytes]
        if not binary:
            continue
        lengths = sum(func.coalesce(func.length(c), 0) for c in binary)
        stmt = select(func.coalesce(func.sum(lengths), 0))
        compiled = stmt.compile(dialect=ledger._x.dialect)
        async with ledger._read() as x:
            rows = await x.fetch(str(compiled), compiled.params)
        total += int(next(iter(rows[0].values())))
    return total


async def measure(url: str, steps: int, item_bytes: int) -> list[int]:
    """The bytes stored after the run's input and after each step (the last: at the end)."""
    backend = await open_backend(url, checkpoint_serde())
    try:
        ledger = backend.ledger
        assert isinstance(ledger, SqlLedger)
        graph = loop_graph(steps, item_bytes).compile(checkpointer=backend.saver)
        config: dict[str, Any] = {
            "configurable": {"thread_id": f"bytes-{uuid.uuid4().hex[:8]}"},
            "recursion_limit": steps + 10,
        }
        totals = [await stored_bytes(ledger)]
        async for _ in graph.astream(
            {"items": [], "n": 0}, config, stream_mode="updates", durability="sync"
        ):
            totals.append(await stored_bytes(ledger))  # one update per step of the loop
        totals[-1] = await stored_bytes(ledger)  # the last step's checkpoint, surely committed
        return totals
    finally:
        await backend.aclose()


def report(name: str, totals: list[int]) -> None:
    steps = len(totals) - 1
    added = [b - a for a, b in itertools.pairwise(totals)]
    shown = ", ".join(
        f"step {s}: {added[s - 1]:,} B" for s in sorted({*SHOWN, steps}) if s <= steps
    )
    top = max(range(steps), key=lambda i: added[i])
    print(
        f"{name}: {shown}; median {statistics.median(added):,.0f} B, largest {added[top]:,} B "
        f"(step {top + 1}); total {totals[-1]:,} B over {steps} steps "
        f"({totals[-1] / steps:,.0f} B a step)"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--item-bytes", type=int, default=256)
    parser.add_argument("--postgres", help="admin URL: a scratch database is made and dropped")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'bytes.db'}"
        report("SQLite", await measure(url, args.steps, args.item_bytes))
    if args.postgres:
        import psycopg

        name = f"stageline_bytes_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(args.postgres, autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            pg = args.postgres.rsplit("/", 1)[0] + f"/{name}"
            report("Postgres", await measure(pg, args.steps, args.item_bytes))
        finally:
            with psycopg.connect(args.postgres, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    asyncio.run(main())
