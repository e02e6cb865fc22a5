"""A thin builder over LangGraph's ``StateGraph``: stages, edges, routes, fan-out, bounded loops."""

from __future__ import annotations

import hashlib
import itertools
import json
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, cast

from langgraph.graph import END, START, StateGraph

from stageline.errors import TemplateError
from stageline.stages import LOOPS_KEY, RESERVED_KEYS, Budget, RunContext, Stage, make_node
from stageline.templates._graphs import (
    _code_hasher,
    _get,
    _graph_shape,
    _hints,
    _stable_repr,
    _with_loops,
)
from stageline.templates._human import WaitNode, gate_node, question_node
from stageline.templates._inputs import check_required, required_keys
from stageline.templates._shape import (
    GateSpec,
    Loop,
    QuestionSpec,
    Shape,
    Where,
    _Fanout,
    _Node,
    _Route,
)

__all__ = ["END", "Template"]


def _caller() -> Where:
    """File and line of the first frame outside this module (for error messages)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return ("<template>", None)
    return (frame.f_code.co_filename, frame.f_lineno)


def _end(target: str) -> str:
    return END if target in (END, "END", "end") else target


class Template:
    """A named, versioned graph of stages over a state schema (TypedDict or pydantic model)."""

    def __init__(
        self,
        name: str,
        *,
        state: type[Any],
        version: str = "1",
        description: str = "",
        checkpoint_types: Iterable[type[Any]] = (),
        source: str | None = None,
        budget: Budget | Mapping[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.state = state
        self.version = str(version)
        self.description = description
        self.source = source or _caller()[0]
        self.checkpoint_types: list[type[Any]] = list(checkpoint_types)
        self.budget = Budget.of(budget)
        """Token and cost limits for each run (a run's own ``budget`` goes over it)."""
        self._nodes: dict[str, _Node] = {}
        self._edges: list[tuple[str, str, Where]] = []
        self._routes: list[_Route] = []
        self._fanouts: list[_Fanout] = []
        self._loops: dict[str, Loop] = {}
        self._start: tuple[str, Where] | None = None
        self._validated = False
        self._gates: dict[str, GateSpec] = {}
        self._questions: dict[str, QuestionSpec] = {}
        self._input_checks: list[Callable[[Mapping[str, Any]], None]] = []
        self._settings_checks: list[Callable[..., Any]] = []
        self._required: dict[str, str] = {}
        self._subgraphs: dict[str, Any] = {}
        """Nodes that run a LangGraph graph as it is (``add_graph``): node -> its builder."""

    # -- building ---------------------------------------------------------------------------

    def add_stage(
        self,
        node: str | Stage | Callable[..., Any],
        stage_or_fn: Any = None,
        *,
        where: Where | None = None,
    ) -> Template:
        """Add a node running a stage (a ``Stage`` or a plain ``(state, ctx)`` function), or a
        LangGraph graph (see ``add_graph``)."""
        if stage_or_fn is None:
            stage_or_fn = node
            node = str(getattr(node, "__name__", None) or getattr(node, "name", ""))
            if isinstance(stage_or_fn, Stage):
                node = stage_or_fn.name.rpartition(":")[2].rpartition(".")[2]
        assert isinstance(node, str)
        where = where or _caller()
        if isinstance(getattr(stage_or_fn, "builder", stage_or_fn), StateGraph):
            return self.add_graph(node, stage_or_fn, where=where)  # a LangGraph graph
        if node in self._nodes:
            raise TemplateError(f"node {node!r} is defined twice", source=where[0], line=where[1])
        if node in (START, END) or node in RESERVED_KEYS:
            raise TemplateError(f"{node!r} is a reserved name", source=where[0], line=where[1])
        made = stage_or_fn if isinstance(stage_or_fn, Stage) else Stage(fn=stage_or_fn, name=node)
        self._nodes[node] = _Node(name=node, stage=made, where=where)
        if self._start is None:
            self._start = (node, where)
        self._touch()
        return self

    def add_graph(self, node: str, graph: Any, *, where: Where | None = None) -> Template:
        """Add a node that runs a LangGraph graph (a ``StateGraph`` or compiled graph) as a
        subgraph over this template's state: its nodes are recorded as ``node/inner``."""
        builder = getattr(graph, "builder", graph)
        if not isinstance(builder, StateGraph):
            where = where or _caller()
            raise TemplateError(
                f"add_graph({node!r}) needs a StateGraph or compiled graph, got "
                f"{type(graph).__name__}",
                source=where[0],
                line=where[1],
            )

        def subgraph(state: Any, ctx: Any) -> Any:  # never runs: build() adds the graph itself
            raise TypeError(node)

        self.add_stage(
            node,
            Stage(fn=subgraph, name=node, metadata={"machinery": True}),
            where=where or _caller(),
        )
        self._subgraphs[node] = builder
        return self

    def set_start(self, node: str, *, where: Where | None = None) -> Template:
        self._start = (node, where or _caller())
        self._touch()
        return self

    def add_edge(self, source: str, target: str, *, where: Where | None = None) -> Template:
        self._edges.append((source, _end(target), where or _caller()))
        self._touch()
        return self

    def add_sequence(self, *nodes: str, where: Where | None = None) -> Template:
        """Edges ``a -> b -> c``."""
        where = where or _caller()
        for source, target in itertools.pairwise(nodes):
            self.add_edge(source, target, where=where)
        return self

    def add_route(
        self,
        source: str,
        router: Callable[[Any], Any],
        targets: Mapping[str, str] | Sequence[str],
        *,
        where: Where | None = None,
    ) -> Template:
        """After ``source``, go where ``router(state)`` says: a key of ``targets`` (or a node)."""
        mapping = (
            {str(k): _end(v) for k, v in targets.items()}
            if isinstance(targets, Mapping)
            else {_end(t): _end(t) for t in targets}
        )
        self._routes.append(
            _Route(source=source, router=router, targets=mapping, where=where or _caller())
        )
        self._touch()
        return self

    def add_fanout(
        self,
        source: str,
        targets: Sequence[str],
        *,
        join: str | None = None,
        where: Where | None = None,
    ) -> Template:
        """Run ``targets`` in parallel after ``source``; ``join`` runs once all have finished."""
        self._fanouts.append(
            _Fanout(
                source=source,
                targets=tuple(targets),
                join=join and _end(join),
                where=where or _caller(),
            )
        )
        self._touch()
        return self

    def add_loop(
        self,
        name: str,
        *,
        head: str,
        max_iterations: int,
        on_exhausted: str | None = None,
        where: Where | None = None,
    ) -> Template:
        """Declare a loop whose ``head`` runs at most ``max_iterations`` times per run."""
        where = where or _caller()
        bad = isinstance(max_iterations, bool) or not isinstance(max_iterations, int)
        if bad or max_iterations < 1:
            raise TemplateError(
                f"loop {name!r} needs a bound of at least 1, got {max_iterations!r}",
                source=where[0],
                line=where[1],
            )
        other = next((lp for lp in self.loops if lp.head == head and lp.name != name), None)
        if other is not None:  # one counter per head: the other loop's bound would not hold
            raise TemplateError(
                f"loop {name!r}: node {head!r} already heads loop {other.name!r}; a node heads "
                "one loop (declare the loop before a gate whose changes go to it, and the gate "
                "uses it)",
                source=where[0],
                line=where[1],
            )
        self._loops[name] = Loop(
            name=name,
            head=head,
            max_iterations=max_iterations,
            on_exhausted=on_exhausted and _end(on_exhausted),
            where=where,
        )
        self._touch()
        return self

    def add_input_check(self, check: Callable[..., Any], *, settings: bool = False) -> Template:
        """Check a run's inputs before the run exists: ``check(inputs)`` raises ``InputError``
        naming the input at fault (a missing path, a missing required input). ``settings``:
        ``check(inputs, settings)`` runs first, and may return inputs it fills in."""
        (self._settings_checks if settings else self._input_checks).append(check)
        return self

    def check_inputs(self, inputs: Mapping[str, Any], settings: Any = None) -> dict[str, Any]:
        """Run the template's input checks (the runner calls this before creating a run);
        returns the inputs with what the checks of the project's ``settings`` filled in."""
        filled = dict(inputs)
        for given in self._settings_checks:
            filled.update({k: v for k, v in (given(filled, settings) or {}).items()})
        for check in self._input_checks:
            check(filled)
        return filled

    def require_input(self, key: str, what: str = "") -> Template:
        """Declare ``key`` an input every run needs (``what`` it is, for the error); the state
        schema's required keys are required too (see ``templates._inputs``)."""
        self._required[key] = what
        return self

    @property
    def required_inputs(self) -> dict[str, str]:
        """The inputs a run cannot start without: key -> what it is (may be empty)."""
        return {**dict.fromkeys(required_keys(self.state), ""), **self._required}

    def check_required(self, inputs: Mapping[str, Any]) -> None:
        """``InputError`` naming every required input missing from a new run's ``inputs``."""
        check_required(self.name, self.required_inputs, inputs)

    def add_gate(self, name: str, **options: Any) -> Template:
        """Add a gate node (approve, reject, request changes); see ``_human.gate_node``."""
        where = options.pop("where", None) or _caller()
        made = gate_node(name, state=self.state, loops=self.loops, where=where, **options)
        return self._add_waiting(made, where=where)

    def add_question(self, name: str, **options: Any) -> Template:
        """Add a question node; see ``_human.question_node``."""
        where = options.pop("where", None) or _caller()
        return self._add_waiting(
            question_node(name, state=self.state, where=where, **options), where=where
        )

    def _add_waiting(self, made: WaitNode, *, where: Where | None = None) -> Template:
        """Add a gate or question node that ``templates._human`` (or ``_park``) made."""
        name = made.spec.name
        if (loop := made.new_loop) is not None:
            self.add_loop(
                loop.name, head=loop.head, max_iterations=loop.max_iterations, where=loop.where
            )
        self.add_stage(name, made.stage, where=where)
        if isinstance(made.spec, GateSpec):
            assert made.route is not None and made.targets is not None
            self.add_route(name, made.route, made.targets, where=where)
            self._gates[name] = made.spec
        else:
            self._questions[name] = made.spec
        return self

    def register_types(self, *types: type[Any]) -> Template:
        """Allow these types in this template's checkpoints."""
        self.checkpoint_types.extend(types)
        return self

    def _touch(self) -> None:
        self._validated = False
        self.__dict__.pop("digest", None)

    # -- reading ----------------------------------------------------------------------------

    @property
    def nodes(self) -> list[str]:
        return list(self._nodes)

    def stage_of(self, node: str) -> Stage:
        return self._nodes[node].stage

    @property
    def plain_nodes(self) -> frozenset[str]:
        """Nodes whose LangGraph tasks the runner records (no stageline wrapper records them)."""
        return frozenset(self._subgraphs)

    def context_for(self, services: Mapping[str, Any], default: Any) -> Any:
        """The runtime context the graph runs with: stageline's own (``default``)."""
        return default

    @property
    def loops(self) -> list[Loop]:
        return list(self._loops.values())

    @property
    def gates(self) -> dict[str, GateSpec]:
        return dict(self._gates)

    @property
    def questions(self) -> dict[str, QuestionSpec]:
        return dict(self._questions)

    @cached_property
    def digest(self) -> str:
        """A hash of the graph's shape, stage options and stage code."""

        code = _code_hasher()  # one stage behind many nodes: its source read once
        shape = {
            "name": self.name,
            "state": sorted((k, _stable_repr(v)) for k, v in _hints(self.state).items()),
            "nodes": [
                [
                    n.name,
                    n.stage.name,
                    # Gate and question nodes are stageline's code: their options count, not it.
                    "" if n.stage.metadata.get("machinery") else code(n.stage.fn),
                    _stable_repr(n.stage.retry),
                    n.stage.timeout,
                ]
                for n in self._nodes.values()
            ],
            "edges": sorted([s, t] for s, t, _ in self._edges),
            "routes": [[r.source, code(r.router), sorted(r.targets.items())] for r in self._routes],
            "fanouts": [[f.source, list(f.targets), f.join] for f in self._fanouts],
            "loops": sorted(
                [lp.name, lp.head, lp.max_iterations, lp.on_exhausted] for lp in self.loops
            ),
        }
        if self._subgraphs:  # only then: other templates keep their digests
            shape["graphs"] = sorted([n, _graph_shape(g)] for n, g in self._subgraphs.items())
        if self._gates or self._questions:  # only then: other templates keep their digests
            shape["human"] = sorted(
                [k, repr(v)] for k, v in {**self._gates, **self._questions}.items()
            )
        return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:12]

    @property
    def full_version(self) -> str:
        """``version+digest``: what a run records and what resume compares."""
        return f"{self.version}+{self.digest}"

    # -- validation -------------------------------------------------------------------------

    def validate(self) -> None:
        """Refuse a template that cannot run as declared; errors name the file and line."""
        if self._validated:
            return
        shape = Shape(
            nodes=self._nodes,
            edges=self._edges,
            routes=self._routes,
            fanouts=self._fanouts,
            loops=self._loops,
            start=self._start,
            gates=self._gates,
        )
        shape.check(self.name, self.source, self.state)
        self._validated = True

    # -- compiling --------------------------------------------------------------------------

    def graph_schema(self) -> type[Any]:
        """The state schema LangGraph runs: the template's plus the loop counters."""
        return _with_loops(self.state)

    def build(self) -> StateGraph[Any, RunContext, Any, Any]:
        """The validated ``StateGraph``, ready to compile with a checkpointer."""
        self.validate()
        assert self._start is not None
        graph: StateGraph[Any, RunContext, Any, Any] = StateGraph(
            self.graph_schema(),
            context_schema=RunContext,
            input_schema=self.state,
            output_schema=self.state,
        )
        heads = {lp.head: lp for lp in self._loops.values()}
        for name, node in self._nodes.items():
            loop = heads.get(name)
            if name in self._subgraphs:
                graph.add_node(name, self._subgraphs[name].compile(), retry_policy=node.stage.retry)
                continue
            graph.add_node(
                name,
                make_node(
                    name, node.stage, loop=(loop.name, loop.max_iterations) if loop else None
                ),
                retry_policy=node.stage.retry,
                timeout=node.stage.timeout,
            )
        graph.add_edge(START, self._start[0])
        has_out: set[str] = set()
        approved: dict[str, str] = {}
        for s, t, _ in self._edges:
            if s in self._gates:  # an approved gate goes on along its edge: part of its route
                approved[s] = t
                continue
            graph.add_edge(s, t)
            has_out.add(s)
        for r in self._routes:
            if r.source in self._gates:
                r = _Route(
                    source=r.source,
                    router=r.router,
                    where=r.where,
                    targets={**r.targets, "approve": approved.get(r.source, END)},
                )
            router, targets = self._route(r)
            graph.add_conditional_edges(r.source, router, cast(Any, targets))
            has_out.add(r.source)
        for f in self._fanouts:
            for t in f.targets:
                graph.add_edge(f.source, t)
            if f.join:
                graph.add_edge(list(f.targets), f.join)
                has_out.update(f.targets)
            has_out.add(f.source)
        for name in self._nodes:
            if name not in has_out:
                graph.add_edge(name, END)
        return graph

    def _route(self, r: _Route) -> tuple[Callable[[Any], str], dict[str, str]]:
        targets = dict(r.targets)
        exhausted: dict[str, tuple[Loop, str]] = {}
        for loop in self._loops.values():
            if loop.on_exhausted and loop.head in targets.values():
                key = f"__exhausted__{loop.name}"
                targets[key] = loop.on_exhausted
                exhausted[loop.head] = (loop, key)
        router = r.router
        source = r.source

        def route(state: Any) -> str:
            choice = router(state)
            key = str(choice)
            if key not in targets:
                raise TemplateError(
                    f"route after {source!r} chose {choice!r}, which is not one of "
                    f"{sorted(k for k in targets if not k.startswith('__'))}"
                )
            target = targets[key]
            if target in exhausted:
                loop, alt = exhausted[target]
                counts = _get(state, LOOPS_KEY) or {}
                if counts.get(loop.name, 0) >= loop.max_iterations:
                    return alt
            return key

        route.__name__ = f"route_after_{source}"
        return route, targets

    def compile(self, checkpointer: Any, *, store: Any = None) -> Any:
        """The compiled graph the runner drives, over ``checkpointer`` (and LangGraph's
        ``store``: what stages keep across runs, ``ctx.store``)."""
        return self.build().compile(checkpointer=checkpointer, store=store)

    def mermaid(self) -> str:
        """The graph as Mermaid text."""
        return self.build().compile().get_graph(xray=bool(self._subgraphs)).draw_mermaid()
