"""stageline vs raw LangGraph: a 10-node no-op graph, same saver (SQLite) and durability (sync).

Run: ``python benchmarks/bench_runner.py [--runs N] [--rounds R]``. Both engines run in this one
process, interleaved round by round; the figures are medians over rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

import aiosqlite
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import END, START, StateGraph

from stageline.checkpoints import checkpoint_serde
from stageline.config import load_settings
from stageline.runner import Runner
from stageline.templates import Template

NODES = 10


class State(TypedDict, total=False):
    n: int


def raw_graph() -> StateGraph[Any, Any, Any, Any]:
    graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    previous = START
    for i in range(NODES):

        async def step(state: State) -> State:
            return {"n": state.get("n", 0) + 1}

        graph.add_node(f"n{i}", step)
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


async def main(runs: int, rounds: int) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-"))
    conn = await aiosqlite.connect(str(folder / "raw.db"))
    saver = AsyncSqliteSaver(conn, serde=checkpoint_serde())
    raw = raw_graph().compile(checkpointer=saver)
    settings = load_settings(
        cwd=folder,
        env={
            "STAGELINE_HOME": str(folder / ".stageline"),
            "STAGELINE_DATABASE_URL": f"sqlite:///{folder / 'stageline.db'}",
        },
    )
    template = stageline_template()
    raw_ms: list[float] = []
    ours_ms: list[float] = []
    async with Runner.open(settings) as runner:
        for warm in range(3):  # warm both paths up
            await raw.ainvoke(
                {"n": 0}, {"configurable": {"thread_id": f"w{warm}"}}, durability="sync"
            )
            await runner.start(template, {"n": 0})
        for r in range(rounds):
            started = time.perf_counter()
            for i in range(runs):
                await raw.ainvoke(
                    {"n": 0}, {"configurable": {"thread_id": f"r{r}-{i}"}}, durability="sync"
                )
            raw_ms.append((time.perf_counter() - started) * 1000 / runs / NODES)
            started = time.perf_counter()
            for _ in range(runs):
                summary = await runner.start(template, {"n": 0})
                assert summary.state["n"] == NODES, summary
            ours_ms.append((time.perf_counter() - started) * 1000 / runs / NODES)
    await conn.close()
    raw_med = statistics.median(raw_ms)
    ours_med = statistics.median(ours_ms)
    # The median of per-round ratios: each round measures both engines back to back, so a
    # busy moment on the machine slows both sides of one ratio rather than one side of all.
    ratio = statistics.median(o / r for o, r in zip(ours_ms, raw_ms, strict=True))
    return {"raw_ms_per_node": raw_med, "stageline_ms_per_node": ours_med, "ratio": ratio}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="runs per round and engine")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    result = asyncio.run(main(args.runs, args.rounds))
    print(
        "10-node no-op graph, SQLite saver, durability=sync, "
        f"{args.rounds} rounds x {args.runs} runs"
    )
    print(f"  raw LangGraph : {result['raw_ms_per_node']:.3f} ms/node")
    print(f"  stageline     : {result['stageline_ms_per_node']:.3f} ms/node")
    print(
        f"  ratio         : {result['ratio']:.2f}x median of per-round ratios "
        "(stageline adds "
        f"{(result['ratio'] - 1) * 100:+.0f}% per node; aim <= +25%)"
    )
