"""LangGraph's store on the project's database: what a plain graph's nodes (``runtime.store``,
``get_store()``) and a stageline stage (``ctx.store``) keep outlives the run and the runner
(a SQLite file, Postgres); ``memory://`` gets an in-memory store that lives with its runner."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, TypedDict

from langgraph.config import get_store
from langgraph.graph import START, StateGraph
from langgraph.runtime import Runtime
from langgraph.store.memory import InMemoryStore

from stageline.config import Settings
from stageline.ledger import open_store
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class Visits(TypedDict, total=False):
    user: str
    seen: int


async def count_visit(state: Visits, runtime: Runtime[Any]) -> dict[str, Any]:
    """A plain LangGraph node: counts the user's visits in the store."""
    assert runtime.store is not None
    item = await runtime.store.aget(("visits",), state["user"])
    seen = (item.value["count"] if item else 0) + 1
    await runtime.store.aput(("visits",), state["user"], {"count": seen})
    return {}


def read_visits(state: Visits) -> dict[str, Any]:
    """A sync node reading through ``get_store()``."""
    item = get_store().get(("visits",), state["user"])
    return {"seen": item.value["count"] if item else 0}


def visits_graph(**options: Any) -> Any:
    builder = StateGraph(Visits)
    builder.add_node("count_visit", count_visit)
    builder.add_node("read_visits", read_visits)
    builder.add_edge(START, "count_visit")
    builder.add_edge("count_visit", "read_visits")
    return builder.compile(name=options.pop("name", "visits"), **options)


async def remember(state: Visits, ctx: StageContext) -> dict[str, Any]:
    """A stageline stage keeping a note per user in ``ctx.store``."""
    assert ctx.store is not None
    notes = await ctx.store.asearch(("notes", state["user"]))
    await ctx.store.aput(("notes", state["user"]), f"n{len(notes)}", {"by": ctx.run_id})
    return {"seen": len(notes) + 1}


NOTES = Template("notes", state=Visits).add_stage("remember", remember)


async def test_graphs_and_stages_keep_what_they_store_across_runs_and_runners(
    shared_backend_url: str, settings_for: Callable[[str], Settings]
) -> None:
    settings = settings_for(shared_backend_url)
    async with Runner.open(settings) as runner:
        assert not isinstance(runner.store, InMemoryStore)
        first = await runner.start(graph=visits_graph(), inputs={"user": "ada"})
        assert first.status == "succeeded" and first.state["seen"] == 1
        again = await runner.start(graph=visits_graph(), inputs={"user": "ada"})
        assert again.state["seen"] == 2
        noted = await runner.start(NOTES, {"user": "ada"})
        assert noted.status == "succeeded" and noted.state["seen"] == 1
    async with Runner.open(settings) as reopened:  # another process's runner, the same rows
        third = await reopened.start(graph=visits_graph(), inputs={"user": "ada"})
        assert third.state["seen"] == 3
        other = await reopened.start(graph=visits_graph(), inputs={"user": "bob"})
        assert other.state["seen"] == 1
        noted_again = await reopened.start(NOTES, {"user": "ada"})
        assert noted_again.state["seen"] == 2
        kept = await reopened.store.asearch(("notes", "ada"))
        assert sorted(i.value["by"] for i in kept) == sorted(
            [noted.run.run_id, noted_again.run.run_id]
        )
        assert await reopened.store.alist_namespaces(prefix=("notes",)) == [("notes", "ada")]


async def test_a_memory_runner_keeps_its_store_in_memory(memory_settings: Settings) -> None:
    async with Runner.open(memory_settings) as runner:
        assert isinstance(runner.store, InMemoryStore)
        await runner.start(graph=visits_graph(), inputs={"user": "ada"})
        again = await runner.start(graph=visits_graph(), inputs={"user": "ada"})
        assert again.state["seen"] == 2
        noted = await runner.start(NOTES, {"user": "ada"})
        assert noted.state["seen"] == 1
        own = InMemoryStore()  # a graph compiled with a store of its own keeps it
        await runner.start(graph=visits_graph(name="own", store=own), inputs={"user": "cy"})
        assert (await own.aget(("visits",), "cy")) is not None
        assert await runner.store.aget(("visits",), "cy") is None
    async with Runner.open(memory_settings) as fresh:  # nothing outlives a memory runner
        assert await fresh.store.aget(("visits",), "ada") is None


async def test_runners_opening_a_new_database_at_once_all_get_the_store(
    shared_backend_url: str,
) -> None:
    """Processes racing to create the store's tables: each one's store works (the loser of the
    race sets up again and finds them made)."""
    async with contextlib.AsyncExitStack() as stack:
        stores = await asyncio.gather(
            *[stack.enter_async_context(open_store(shared_backend_url)) for _ in range(4)]
        )
        await asyncio.gather(  # each opens and sets up on its first use: all at once
            *[store.aput(("race",), f"k{n}", {"n": n}) for n, store in enumerate(stores)]
        )
        assert len(await stores[0].asearch(("race",))) == 4
