"""Any LangGraph graph as a template: a ``StateGraph``, a compiled graph, or a factory of one.

stageline runs such a graph unchanged: it compiles the graph's builder (the ``StateGraph``,
``CompiledStateGraph.builder`` for a compiled one) with its own checkpointer, and records each
node from LangGraph's ``tasks`` stream (``runner._tasks``), since the nodes carry none of
stageline's wrappers. The template's version is a digest of the graph's structure: its nodes,
edges and branches (LangGraph's own drawing, ``get_graph``) and its state's channels, so a
changed graph is "template changed" for the runs in flight.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import typing
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from langgraph.graph import StateGraph
from langgraph.graph.state import CompiledStateGraph

from stageline.errors import InputError, TemplateError
from stageline.templates._builder import Template
from stageline.templates._graphs import _graph_shape, _hints, _stable_repr

__all__ = ["GraphTemplate", "graph_template", "is_graph"]


def is_graph(obj: Any) -> bool:
    """Whether ``obj`` is a LangGraph graph stageline can run (a ``StateGraph`` or compiled)."""
    return isinstance(obj, StateGraph | CompiledStateGraph)


class GraphTemplate(Template):
    """A LangGraph graph, run as it is: every node is recorded from the ``tasks`` stream."""

    def __init__(
        self,
        name: str,
        graph: StateGraph[Any, Any, Any, Any] | CompiledStateGraph[Any, Any, Any, Any],
        *,
        source: str,
        description: str = "",
    ) -> None:
        builder = graph.builder if isinstance(graph, CompiledStateGraph) else graph
        if not isinstance(builder, StateGraph):
            raise TemplateError("a compiled graph without its StateGraph builder", source=source)
        super().__init__(
            name,
            state=builder.state_schema,
            description=description,
            source=source,
            checkpoint_types=(),
        )
        self.graph = builder
        self.context_schema: type[Any] | None = builder.context_schema
        self._compile_options: dict[str, Any] = {}
        if isinstance(graph, CompiledStateGraph):
            if graph.interrupt_before_nodes:
                self._compile_options["interrupt_before"] = graph.interrupt_before_nodes
            if graph.interrupt_after_nodes:
                self._compile_options["interrupt_after"] = graph.interrupt_after_nodes
            if graph.store is not None:
                self._compile_options["store"] = graph.store

    @property
    def plain_nodes(self) -> frozenset[str]:
        return frozenset(self.graph.nodes)

    @property
    def nodes(self) -> list[str]:
        return list(self.graph.nodes)

    @property
    def required_inputs(self) -> dict[str, str]:
        return {}  # LangGraph's tools ask for none: a node reads what it finds

    def check_required(self, inputs: Mapping[str, Any]) -> None:
        return None

    def typed_inputs(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        """The inputs as the graph takes them: a text that is JSON (``-i messages='[...]'``)
        read as JSON for a key that is not text; LangGraph's reducers check the rest."""
        hints = _hints(self.graph.state_schema)
        typed: dict[str, Any] = {}
        for key, value in inputs.items():
            if isinstance(value, str) and hints.get(key) is not str:
                with contextlib.suppress(ValueError):
                    value = json.loads(value)
            typed[key] = value
        return typed

    def validate(self) -> None:
        if not self.graph.nodes:
            raise TemplateError(f"graph {self.name!r} has no nodes", source=self.source)

    def build(self) -> StateGraph[Any, Any, Any, Any]:
        return self.graph

    def compile(self, checkpointer: Any, *, store: Any = None) -> Any:
        # A graph compiled with a store of its own keeps it; the others get the runner's.
        return self.graph.compile(
            checkpointer=checkpointer, **{"store": store, **self._compile_options}
        )

    def mermaid(self) -> str:
        return str(self.graph.compile().get_graph(xray=True).draw_mermaid())

    @cached_property
    def digest(self) -> str:
        """A hash of the graph's structure: nodes, edges, branches, state channels."""
        shape = {
            "name": self.name,
            "graph": _graph_shape(self.graph),
            "branches": sorted(
                [node, sorted(branches)] for node, branches in self.graph.branches.items()
            ),
            "channels": sorted(
                (k, _stable_repr(v)) for k, v in _hints(self.graph.state_schema).items()
            ),
            "retry": sorted(
                (n, _stable_repr(spec.retry_policy)) for n, spec in self.graph.nodes.items()
            ),
        }
        return hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:12]

    def context_for(self, services: Mapping[str, Any], default: Any) -> Any:
        """The runtime context the graph's nodes read: its ``context_schema`` made from the
        services of that name (its defaults for the rest); ``default`` without a schema."""
        schema = self.context_schema
        if schema is None:
            return default
        fields = _fields(schema)
        given = {k: v for k, v in services.items() if k in fields}
        try:
            return schema(**given)
        except Exception as exc:
            raise InputError(
                f"graph {self.name!r} needs its context ({schema.__name__}: "
                f"{', '.join(sorted(fields))}) from services: {exc}"
            ) from exc

    def check_context(self, context: Mapping[str, Any]) -> None:
        """Refuse a run's own ``context`` (as a LangGraph SDK client gives one) that the graph's
        ``context_schema`` does not take."""
        schema = self.context_schema
        if schema is None:
            raise InputError(f"graph {self.name!r} takes no context (it has no context_schema)")
        fields = _fields(schema)
        if unknown := sorted(set(context) - fields):
            raise InputError(
                f"unknown context key {unknown[0]!r} for graph {self.name!r}; its context "
                f"({schema.__name__}) has: {', '.join(sorted(fields))}"
            )
        try:
            schema(**context)
        except Exception as exc:
            raise InputError(f"bad context for graph {self.name!r}: {exc}") from exc


def _fields(schema: type[Any]) -> set[str]:
    if dataclasses.is_dataclass(schema):
        return {f.name for f in dataclasses.fields(schema)}
    model_fields = getattr(schema, "model_fields", None)
    if isinstance(model_fields, Mapping):
        return set(model_fields)
    return set(typing.get_type_hints(schema)) if isinstance(schema, type) else set()


def graph_template(obj: Any, name: str, source: str, *, description: str = "") -> GraphTemplate:
    """The template of a graph object: a ``StateGraph``, a compiled graph, or a factory (no
    argument, or one: the run's config) that returns one."""
    made = obj
    if not is_graph(made) and callable(made):
        try:
            takes = len(inspect.signature(made).parameters)
        except (TypeError, ValueError):
            takes = 0
        made = made({"configurable": {}}) if takes else made()
        if inspect.isawaitable(made):
            close = getattr(made, "close", None)
            if close is not None:
                close()
            raise TemplateError("an async graph factory is not supported", source=source)
    if not is_graph(made):
        raise TemplateError(
            f"{name!r} is {type(made).__name__}, not a LangGraph StateGraph, compiled graph or "
            "factory of one",
            source=source,
        )
    return GraphTemplate(name, made, source=source, description=description)
