"""Where a plain LangGraph graph's interrupts were asked (a node, a subgraph node), and the
checkpoint cross-check of their pending writes against the waits the ledger recorded."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.types import Command, Interrupt, interrupt

from stageline.errors import CheckpointCorrupt
from stageline.ledger import Run, RunStatus, Wait, WaitStatus
from stageline.runner._interrupts import interrupt_places, interrupt_wait
from stageline.runner._trust import check_checkpoint
from stageline.runner._trust_writes import check_writes


class S(TypedDict, total=False):
    a: str
    b: str


def inner(state: S) -> dict[str, Any]:
    return {"a": str(interrupt({"q": "inner?"}))}


def outer(state: S) -> dict[str, Any]:
    return {"b": str(interrupt("outer?"))}


def graph() -> Any:
    sub = StateGraph(S).add_node("inner", inner).add_edge(START, "inner").compile()
    parent = StateGraph(S).add_node("sub", sub).add_node("outer", outer)
    return (
        parent.add_edge(START, "sub").add_edge(START, "outer").compile(checkpointer=InMemorySaver())
    )


CONFIG: Any = {"configurable": {"thread_id": "t"}}


async def _writes(made: Any) -> list[tuple[str, str, Any]]:
    saved = await made.checkpointer.aget_tuple(CONFIG)
    return list(saved.pending_writes)


def _check(writes: list[tuple[str, str, Any]], waits: list[Wait]) -> None:
    check_writes(writes, "t", waits, None, is_interrupt=lambda v: isinstance(v, Interrupt))


async def asked_twice() -> tuple[Any, Interrupt, Interrupt, list[Wait]]:
    """A run of ``graph`` waiting at its subgraph's interrupt and at its own, and their waits."""
    made = graph()
    chunks = [c async for c in made.astream({}, CONFIG)]
    by_value = {str(i.value): i for c in chunks for i in c.get("__interrupt__", ())}
    sub, top = by_value["{'q': 'inner?'}"], by_value["outer?"]
    places = await interrupt_places(made, "t")
    run = Run(run_id="t", template="x", template_version="1", status=RunStatus.WAITING)
    return made, sub, top, [interrupt_wait(run, i, places[i.id], 0.0) for i in (sub, top)]


async def test_a_subgraph_interrupt_is_placed_in_its_namespace_and_resumed_there() -> None:
    made, sub, top, waits = await asked_twice()
    places = await interrupt_places(made, "t")
    node, ns, path = places[sub.id]
    assert (node, path) == ("sub", ("sub", "inner")) and ns.startswith("sub:")
    assert places[top.id] == ("outer", "", ("outer",))
    assert waits[0].name == "sub/inner" and waits[0].payload["namespace"] == ns
    _check(await _writes(made), waits)  # what the ledger asked: trusted
    await check_checkpoint(made.checkpointer, "t", waits, None)

    async for _ in made.astream(Command(resume={sub.id: "X"}), CONFIG):
        pass
    assert (await made.aget_state(CONFIG)).values == {"a": "X"}  # resumed inside the subgraph
    writes = await _writes(made)
    with pytest.raises(CheckpointCorrupt, match="yet has a pending write"):
        _check(writes, waits)  # the subgraph went on, but the ledger recorded no answer
    answered = replace(waits[0], status=WaitStatus.APPLIED, response={"value": "X"})
    _check(writes, [answered, waits[1]])

    forged = [*writes, (writes[0][0], "__resume__", ["not recorded"])]
    with pytest.raises(CheckpointCorrupt, match="no decision the ledger recorded"):
        _check(forged, [answered, waits[1]])
    other = replace(waits[1], payload={**waits[1].payload, "value": "something else"})
    with pytest.raises(CheckpointCorrupt, match="not the one the ledger asked"):
        _check(writes, [answered, other])


async def test_a_resume_value_forged_in_a_subgraphs_checkpoint_is_refused() -> None:
    made, _, _, waits = await asked_twice()
    inner_config: Any = {
        "configurable": {"thread_id": "t", "checkpoint_ns": waits[0].payload["namespace"]}
    }
    inner = await made.checkpointer.aget_tuple(inner_config)
    [(task, _, _)] = [w for w in inner.pending_writes if w[1] == "__interrupt__"]
    await made.checkpointer.aput_writes(inner.config, [("__resume__", ["forged"])], task)
    with pytest.raises(CheckpointCorrupt, match="no decision the ledger recorded"):
        await check_checkpoint(made.checkpointer, "t", waits, None)
