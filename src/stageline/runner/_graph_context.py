"""A run's own context: what a graph with a ``context_schema`` reads through its runtime.

LangGraph's clients give a run its context when they start it (``runs.create(...,
context={...})``). stageline keeps it with the run's inputs (never given to the graph as input),
so that every process that advances the run, a resume or a retry in another one included, makes
the same context: the graph's ``context_schema`` from this context, over the services of the
same names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stageline.errors import InputError
from stageline.templates import GraphTemplate, Template

__all__ = ["CONTEXT_INPUT", "run_context", "with_context"]

CONTEXT_INPUT = "stageline_context"
"""The run input (kept with the run, never given to the graph) holding the run's context."""


def with_context(
    template: Template, inputs: Mapping[str, Any], context: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The inputs to record, with the run's context beside them (checked against the graph's
    ``context_schema``); the inputs as they are without one."""
    if not context:
        return dict(inputs)
    if not isinstance(context, Mapping):
        raise InputError(f"a run's context is a mapping of names to values, not {context!r}")
    if not isinstance(template, GraphTemplate):
        raise InputError(
            f"template {template.name!r} takes no context; a LangGraph graph with a "
            "context_schema does"
        )
    template.check_context(context)
    try:
        kept = json.loads(json.dumps(dict(context)))
    except (TypeError, ValueError) as exc:
        raise InputError(f"a run's context must be JSON: {exc}") from exc
    return {**inputs, CONTEXT_INPUT: kept}


def run_context(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """The context a run was started with (empty without one)."""
    found = inputs.get(CONTEXT_INPUT)
    return dict(found) if isinstance(found, Mapping) else {}
