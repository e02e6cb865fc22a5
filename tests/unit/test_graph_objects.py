"""A LangGraph graph object given to ``Runner.start(graph=...)``, on a real SQLite file: the
name its runs are recorded under, one template (compiled once) for the same graph started
again, a new one for another graph of that name, and what is said of an object that is no
graph."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from langgraph.graph import START, StateGraph

from stageline.errors import TemplateError
from stageline.runner import Runner


class S(TypedDict, total=False):
    text: str


def greeting(word: str) -> StateGraph[Any, Any, Any, Any]:
    def greet(state: S) -> dict[str, Any]:
        return {"text": word}

    builder = StateGraph(S)
    builder.add_node("greet", greet)
    builder.add_edge(START, "greet")
    return builder


async def started_twice(runner: Runner, graph: Any, name: str) -> None:
    """Start ``graph`` twice: both runs are ``name``'s, of one template compiled once."""
    first = await runner.start(graph=graph, inputs={})
    assert (first.run.template, first.state) == (name, {"text": "hi"})
    template = runner.graphs.load(name)
    compiled = runner.graphs.graph(template)
    again = await runner.start(graph=graph, inputs={})
    assert (again.run.template, again.state) == (name, {"text": "hi"})
    assert runner.graphs.load(name) is template
    assert runner.graphs.graph(template) is compiled


async def test_a_state_graph_has_no_name_of_its_own_so_its_runs_are_graph(runner: Runner) -> None:
    await started_twice(runner, greeting("hi"), "graph")


async def test_a_compiled_graph_left_unnamed_runs_as_graph(runner: Runner) -> None:
    await started_twice(runner, greeting("hi").compile(), "graph")  # LangGraph's default name


async def test_a_compiled_graph_runs_under_its_name_and_another_graph_of_it_replaces_it(
    runner: Runner,
) -> None:
    await started_twice(runner, greeting("hi").compile(name="greeter"), "greeter")
    other = greeting("hello").compile(name="greeter")
    done = await runner.start(graph=other, inputs={})
    assert (done.run.template, done.state) == ("greeter", {"text": "hello"})
    assert runner.graphs.load("greeter").graph is other.builder


async def test_an_object_that_is_no_graph_is_refused_naming_where_it_came_from(
    runner: Runner,
) -> None:
    with pytest.raises(TemplateError) as info:
        await runner.start(graph=object(), inputs={})
    assert str(info.value) == (
        "python:graph: 'graph' is object, not a LangGraph StateGraph, compiled graph or "
        "factory of one"
    )
    assert await runner.ledger.list_runs() == []
