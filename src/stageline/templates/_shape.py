"""A template's shape: the nodes, edges, routes, fan-outs, loops, gates and question nodes it
declares, each with the file and line it was declared at, and the checks that it can run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from langgraph.graph import END

from stageline.errors import TemplateError
from stageline.stages import Stage
from stageline.templates._graphs import _back_edges, _cycles, _has_reducer, _hints

__all__ = ["GateSpec", "Loop", "QuestionSpec", "Shape", "Where", "_Fanout", "_Node", "_Route"]

Where = tuple[str, int | None]


@dataclass(frozen=True, kw_only=True)
class Loop:
    """A declared loop: its head node runs at most ``max_iterations`` times in one run."""

    name: str
    head: str
    max_iterations: int
    on_exhausted: str | None = None
    """Where a route that would re-enter the head goes once the budget is spent."""
    where: Where = ("<template>", None)


@dataclass(kw_only=True)
class _Route:
    source: str
    router: Callable[[Any], Any]
    targets: dict[str, str]
    where: Where


@dataclass(kw_only=True)
class _Fanout:
    source: str
    targets: tuple[str, ...]
    join: str | None
    where: Where


@dataclass(kw_only=True)
class _Node:
    name: str
    stage: Stage
    where: Where


@dataclass(frozen=True, kw_only=True)
class GateSpec:
    """A gate as declared: where its decisions lead and its deadline."""

    name: str
    changes_to: str | None
    reject_to: str | None
    deadline: float
    on_deadline: tuple[str, ...]

    @property
    def ends_run_on_reject(self) -> bool:
        """A reject with no reject route ends the run ``rejected``."""
        return self.reject_to is None


@dataclass(frozen=True, kw_only=True)
class QuestionSpec:
    """A question node as declared: its deadline and how many sets it may ask in a row."""

    name: str
    max_turns: int
    deadline: float
    on_deadline: tuple[str, ...]


@dataclass(kw_only=True)
class Shape:
    """What a ``Template`` declares, as its checks read it (the builder's own collections)."""

    nodes: dict[str, _Node] = field(default_factory=dict)
    edges: list[tuple[str, str, Where]] = field(default_factory=list)
    routes: list[_Route] = field(default_factory=list)
    fanouts: list[_Fanout] = field(default_factory=list)
    loops: dict[str, Loop] = field(default_factory=dict)
    start: tuple[str, Where] | None = None
    gates: dict[str, GateSpec] = field(default_factory=dict)

    def successors(self) -> dict[str, set[str]]:
        succ: dict[str, set[str]] = {n: set() for n in self.nodes}
        for s, t, _ in self.edges:
            succ.setdefault(s, set()).add(t)
        for r in self.routes:
            succ.setdefault(r.source, set()).update(r.targets.values())
            for loop in self.loops.values():
                if loop.head in r.targets.values() and loop.on_exhausted:
                    succ[r.source].add(loop.on_exhausted)
        for f in self.fanouts:
            succ.setdefault(f.source, set()).update(f.targets)
            if f.join:
                for t in f.targets:
                    succ.setdefault(t, set()).add(f.join)
        return succ

    def check(self, name: str, source: str, state: type[Any]) -> None:
        """Refuse a shape that cannot run as declared; errors name the file and line."""

        def fail(msg: str, where: Where) -> None:
            raise TemplateError(msg, source=where[0], line=where[1])

        if not self.nodes:
            fail(f"template {name!r} has no stages", (source, None))
        assert self.start is not None
        if self.start[0] not in self.nodes:
            fail(f"start node {self.start[0]!r} is not a stage of this template", self.start[1])

        def check(node: str, where: Where, role: str) -> None:
            if node != END and node not in self.nodes:
                known = ", ".join(self.nodes)
                fail(f"{role} {node!r} is not a node of this template (nodes: {known})", where)

        for s, t, where in self.edges:
            check(s, where, "edge from")
            check(t, where, "edge to")
        for r in self.routes:
            check(r.source, r.where, "route from")
            for t in r.targets.values():
                check(t, r.where, "route to")
        for f in self.fanouts:
            check(f.source, f.where, "fan-out from")
            for t in f.targets:
                check(t, f.where, "fan-out to")
            if f.join:
                check(f.join, f.where, "fan-out join")
        for loop in self.loops.values():
            check(loop.head, loop.where, f"loop {loop.name!r} head")
            if loop.on_exhausted:
                check(loop.on_exhausted, loop.where, f"loop {loop.name!r} on_exhausted")

        succ = self.successors()
        seen: set[str] = set()
        todo = [self.start[0]]
        while todo:
            n = todo.pop()
            if n in seen or n == END:
                continue
            seen.add(n)
            todo.extend(succ.get(n, ()))
        for n, node in self.nodes.items():
            if n not in seen:
                fail(f"node {n!r} is unreachable from the start node {self.start[0]!r}", node.where)

        self._check_gates(fail)
        self._check_fan_in(state, fail)
        self._check_loops(succ, fail)

    def _check_gates(self, fail: Callable[[str, Where], None]) -> None:
        for name in self.gates:
            outs = [(t, where) for s, t, where in self.edges if s == name]
            if len(outs) > 1:
                fail(
                    f"gate {name!r} has {len(outs)} edges out; an approved gate goes on to one "
                    "node (or ends the run)",
                    outs[1][1],
                )
            for f in self.fanouts:
                if f.source == name:
                    fail(
                        f"gate {name!r} cannot fan out; add an edge to one node that does", f.where
                    )

    def _check_fan_in(self, state: type[Any], fail: Callable[[str, Where], None]) -> None:
        hints = _hints(state)
        for f in self.fanouts:
            writers: dict[str, list[str]] = {}
            for t in f.targets:
                for key in self.nodes[t].stage.writes or ():
                    writers.setdefault(key, []).append(t)
            for key, nodes in writers.items():
                if len(nodes) > 1 and not _has_reducer(hints.get(key)):
                    fail(
                        f"parallel stages {', '.join(nodes)} all write {key!r}, which has no "
                        "reducer; declare it as Annotated[list, operator.add] "
                        "(YAML: reducer: append)",
                        f.where,
                    )

    def _check_loops(self, succ: dict[str, set[str]], fail: Callable[[str, Where], None]) -> None:
        heads = {lp.head for lp in self.loops.values()}
        for component in _cycles(succ):
            if not component & heads:
                nodes = sorted(component)
                first = self._back_edge_where(component) or self.nodes[nodes[0]].where
                fail(
                    f"loop through {' -> '.join(nodes)} has no declared bound; "
                    "declare it with add_loop(name, head=..., max_iterations=N) (YAML: loops:)",
                    first,
                )

    def _back_edge_where(self, component: set[str]) -> Where | None:
        back = self._back_edges()
        for s, t, where in self.edges:
            if (s, t) in back and s in component:
                return where
        for r in self.routes:
            if r.source in component and any((r.source, t) in back for t in r.targets.values()):
                return r.where
        for s, t, where in self.edges:
            if s in component and t in component:
                return where
        for r in self.routes:
            if r.source in component and component & set(r.targets.values()):
                return r.where
        return None

    def _back_edges(self) -> set[tuple[str, str]]:
        """Edges that close a cycle (lead back to a node on the path from the start node)."""
        if self.start is None:
            return set()
        return _back_edges(self.successors(), self.start[0])
