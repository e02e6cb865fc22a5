"""Templates of thousands of nodes are checked without recursion: validation, the loop check
and the digest walk the graph iteratively."""

from __future__ import annotations

import sys
from typing import Any, TypedDict

import pytest

from stageline.errors import TemplateError
from stageline.templates import Template
from stageline.templates._graphs import _back_edges, _cycles

N = 5000


class S(TypedDict, total=False):
    n: int


async def noop(state: S, ctx: Any) -> dict[str, Any]:
    return {}


def linear(n: int) -> Template:
    made = Template("big", state=S)
    for i in range(n):
        made.add_stage(f"n{i}", noop)
    made.add_sequence(*(f"n{i}" for i in range(n)))
    return made


def test_a_linear_template_of_5000_nodes_validates_and_compiles() -> None:
    assert sys.getrecursionlimit() < N
    made = linear(N)
    made.validate()
    assert len(made.digest) == 12
    graph = made.build().compile()
    assert len(graph.get_graph().nodes) == N + 2  # with __start__ and __end__


def test_an_unbounded_loop_through_5000_nodes_is_refused() -> None:
    made = linear(N)
    made.add_route(f"n{N - 1}", lambda state: "again", {"again": "n0", "done": "end"})
    with pytest.raises(TemplateError, match="has no declared bound"):
        made.validate()


def test_a_bounded_loop_through_5000_nodes_is_accepted() -> None:
    made = linear(N)
    made.add_route(f"n{N - 1}", lambda state: "again", {"again": "n0", "done": "end"})
    made.add_loop("round", head="n0", max_iterations=2)
    made.validate()


def test_cycles_and_back_edges_of_a_long_ring() -> None:
    succ = {f"n{i}": {f"n{(i + 1) % N}"} for i in range(N)}
    [ring] = _cycles(succ)
    assert len(ring) == N
    assert _back_edges(succ, "n0") == {(f"n{N - 1}", "n0")}


def test_cycles_finds_each_loop_and_no_acyclic_part() -> None:
    succ = {"a": {"b"}, "b": {"c", "a"}, "c": {"d"}, "d": {"c", "e"}, "e": {"e"}, "f": {"a"}}
    assert sorted(sorted(c) for c in _cycles(succ)) == [["a", "b"], ["c", "d"], ["e"]]
    assert _back_edges(succ, "a") == {("b", "a"), ("d", "c"), ("e", "e")}
