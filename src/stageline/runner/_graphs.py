"""Templates as a runner uses them: found by name, checked against a run, compiled once.

``Graphs`` owns the compiled graphs of one runner (a bounded cache keyed by template identity
and digest) and the templates given as objects, so that resume and retry find them in this
process. It also checks a run's inputs against its template's state.
"""

from __future__ import annotations

import collections
import typing
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.errors import InvalidUpdateError
from langgraph.store.base import BaseStore

from stageline.checkpoints import ensure_checkpointable
from stageline.config import Settings
from stageline.errors import InputError, TemplateChanged
from stageline.ledger import Run
from stageline.plaindata import check_plain_inputs
from stageline.runner._graph_context import CONTEXT_INPUT
from stageline.runner._input_types import typed_inputs
from stageline.runner._state_defaults import remember_graph
from stageline.runner._support import _config, _public_state, _schema_keys
from stageline.runner._waits import DEADLINES_INPUT
from stageline.stages import RESERVED_KEYS
from stageline.templates import GraphTemplate, Template, graph_template, load_template, runs_on

__all__ = ["GRAPH_CACHE_SIZE", "Graphs"]

GRAPH_CACHE_SIZE = 32
"""Compiled graphs a runner keeps (one per template and version in use)."""


class Graphs:
    """The templates and compiled graphs of one runner, over its checkpoint saver."""

    def __init__(
        self, settings: Settings, saver: BaseCheckpointSaver[Any], store: BaseStore | None = None
    ) -> None:
        self.settings = settings
        self._saver = saver
        self._store = store
        """LangGraph's store the graphs are compiled with (``runtime.store``, ``ctx.store``)."""
        self._compiled: collections.OrderedDict[tuple[str, str, str], tuple[Template, Any]] = (
            collections.OrderedDict()
        )
        """Compiled graphs by template identity and digest, least recently used first."""
        self._given: dict[str, Template] = {}
        """Templates given as objects, by name, so resume and retry find them in this process."""

    def __len__(self) -> int:
        """How many compiled graphs are kept."""
        return len(self._compiled)

    def load(self, ref: str | Template) -> Template:
        """The template ``ref`` names (a name, a file, or the object itself)."""
        if isinstance(ref, Template):
            self._given[ref.name] = ref
            return ref
        if ref in self._given:
            return self._given[ref]
        return load_template(ref, self.settings.template_dirs)

    def of_graph(self, graph: Any, name: str | None = None) -> Template:
        """The template of a LangGraph graph object (a ``StateGraph``, a compiled graph or a
        factory), named ``name``, the compiled graph's own name, or ``graph``."""
        if name is None:
            given = getattr(graph, "name", None)
            name = given if isinstance(given, str) and given != "LangGraph" else "graph"
        kept = self._given.get(name)
        if isinstance(kept, GraphTemplate) and kept.graph is getattr(graph, "builder", graph):
            return kept  # the same graph again: compiled once
        return graph_template(graph, name, f"python:{name}")

    def checked(self, run: Run, force: bool) -> Template:
        """The run's template; ``TemplateChanged`` if it changed since the run began (unless
        ``force``)."""
        made = self.load(run.template)
        if not runs_on(made, run.template, run.template_version) and not force:
            raise TemplateChanged(run.run_id, run.template_version, made.full_version)
        return made

    def graph(self, template: Template) -> Any:
        """The template's compiled graph, cached by its identity and digest (bounded: a
        long-lived worker or server must not keep one per run)."""
        key = (template.name, template.source, template.full_version)
        hit = self._compiled.get(key)
        if hit is not None and hit[0] is template:
            self._compiled.move_to_end(key)
            return hit[1]
        graph = template.compile(self.saver(template), store=self._store)
        remember_graph(
            self.settings.home, template.full_version, graph, _schema_keys(template.state)
        )
        self._compiled[key] = (template, graph)  # another object of that name: the newest wins
        self._compiled.move_to_end(key)
        while len(self._compiled) > GRAPH_CACHE_SIZE:
            self._compiled.popitem(last=False)
        return graph

    def saver(self, template: Template) -> BaseCheckpointSaver[Any]:
        """The checkpoint saver, its allowlist widened by the types the template registers."""
        if not template.checkpoint_types:
            return self._saver
        return self._saver.with_allowlist(
            [(t.__module__, t.__qualname__) for t in template.checkpoint_types]
        )

    def check_inputs(
        self, template: Template, inputs: Mapping[str, Any], *, new_run: bool = False
    ) -> dict[str, Any]:
        """The inputs, checked against the template's state (names, types, checkpointability)
        and converted to the declared types (see ``_input_types``). A ``new_run`` must have the
        template's required inputs (a fork or a state edit changes some keys only)."""
        check_plain_inputs(inputs)  # what JSON cannot hold never reaches the ledger
        hints = _schema_keys(template.state)
        unknown = [k for k in inputs if hints and k not in hints]
        if unknown:
            raise InputError(
                f"unknown input {unknown[0]!r} for template {template.name!r}; "
                f"its state keys are: {', '.join(sorted(hints))}"
            )
        if reserved := [k for k in inputs if k in (*RESERVED_KEYS, DEADLINES_INPUT, CONTEXT_INPUT)]:
            raise InputError(f"{reserved[0]!r} is reserved for stageline")
        if new_run:
            template.check_required(inputs)
        # The template's own checks (paths, git, harness, the project's forge settings).
        inputs = template.check_inputs(inputs, self.settings)
        if isinstance(template, GraphTemplate):
            inputs = template.typed_inputs(inputs)
        else:
            inputs = typed_inputs(template.state, inputs, template.name)
        serde = self.saver(template).serde
        for key, value in inputs.items():
            why = ensure_checkpointable(serde, value)  # type: ignore[arg-type]
            if why:
                raise InputError(
                    f"input {key!r} cannot be checkpointed: {why}; "
                    "pass live objects (clients, handles) as services instead"
                )
        return inputs

    async def state(self, made: Template, run_id: str) -> dict[str, Any]:
        """The run's latest state; its last checkpoint's when pending writes clash (fan-in)."""
        try:
            snapshot = await self.graph(made).aget_state(_config(run_id))
        except InvalidUpdateError:
            saved = await self.saver(made).aget_tuple(typing.cast(Any, _config(run_id)))
            values = saved.checkpoint["channel_values"] if saved else {}
            keys = _schema_keys(made.state)
            return _public_state({k: v for k, v in values.items() if k in keys})
        return _public_state(snapshot.values)
