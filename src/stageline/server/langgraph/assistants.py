"""``/assistants``: the templates, as LangGraph assistants (``assistant_id`` = ``graph_id`` = the
template's name; one version each)."""

from __future__ import annotations

import typing
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query
from pydantic import TypeAdapter

from stageline.errors import StagelineError
from stageline.runner import Runner
from stageline.server._auth import require_scope
from stageline.server._state import get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._lookup import known_assistant
from stageline.server.langgraph._mapping import iso, jsonable, matches
from stageline.server.langgraph._models import AssistantSearch
from stageline.templates import list_templates

__all__ = ["router"]

router = APIRouter(tags=["langgraph: assistants"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]

_EPOCH = 0.0


def _assistant(runner: Runner, name: str, origin: str) -> dict[str, Any]:
    description: str | None = None
    version = "1"
    try:
        made = runner.load(name)
        description, version = made.description or None, made.full_version
    except StagelineError:  # a broken template file: listed, without what it would say
        pass
    return {
        "assistant_id": name,
        "graph_id": name,
        "name": name,
        "description": description,
        "config": {},
        "context": {},
        "version": 1,
        "metadata": {"origin": origin, "template_version": version},
        "created_at": iso(_EPOCH),
        "updated_at": iso(_EPOCH),
    }


def _all(runner: Runner) -> list[dict[str, Any]]:
    return [
        _assistant(runner, i.name, i.origin) for i in list_templates(runner.settings.template_dirs)
    ]


@router.post(
    "/assistants/search", summary="Assistants (templates), filtered by graph_id, name or metadata"
)
async def search_assistants(
    body: AssistantSearch, runner: RunnerDep, _actor: Reader
) -> list[dict[str, Any]]:
    found = [
        a
        for a in _all(runner)
        if (body.graph_id is None or a["graph_id"] == body.graph_id)
        and (body.name is None or body.name in a["name"])
        and matches(a["metadata"], body.metadata or {})
    ]
    return found[body.offset : body.offset + body.limit]


@router.post("/assistants/count", summary="How many assistants match")
async def count_assistants(body: AssistantSearch, runner: RunnerDep, _actor: Reader) -> int:
    return len(
        [
            a
            for a in _all(runner)
            if (body.graph_id is None or a["graph_id"] == body.graph_id)
            and matches(a["metadata"], body.metadata or {})
        ]
    )


@router.get("/assistants/{assistant_id}", summary="An assistant (a template)")
async def get_assistant(assistant_id: str, runner: RunnerDep, _actor: Reader) -> dict[str, Any]:
    known_assistant(runner, assistant_id)
    origin = next(
        i.origin for i in list_templates(runner.settings.template_dirs) if i.name == assistant_id
    )
    return _assistant(runner, assistant_id, origin)


@router.get("/assistants/{assistant_id}/graph", summary="The template's graph: nodes and edges")
async def get_assistant_graph(
    assistant_id: str,
    runner: RunnerDep,
    _actor: Reader,
    xray: Annotated[int | bool, Query()] = False,
) -> dict[str, Any]:
    known_assistant(runner, assistant_id)
    drawn = runner.graph(assistant_id).get_graph(xray=xray)
    return dict(jsonable(drawn.to_json()))


def _schema_of(hint: Any) -> dict[str, Any]:
    try:
        return dict(TypeAdapter(hint).json_schema())
    except Exception:  # a type pydantic cannot describe: any value
        return {}


def state_schema(name: str, state: type[Any]) -> dict[str, Any]:
    """A JSON schema of a template's state keys (each key's own schema where pydantic can
    make one)."""
    try:
        hints = typing.get_type_hints(state)
    except Exception:
        hints = dict(getattr(state, "__annotations__", {}))
    required = sorted(getattr(state, "__required_keys__", ()))
    return {
        "title": name,
        "type": "object",
        "properties": {k: _schema_of(v) for k, v in hints.items()},
        **({"required": required} if required else {}),
    }


@router.get("/assistants/{assistant_id}/schemas", summary="The template's state schema")
async def get_assistant_schemas(
    assistant_id: str, runner: RunnerDep, _actor: Reader
) -> dict[str, Any]:
    known_assistant(runner, assistant_id)
    template = runner.load(assistant_id)
    schema = state_schema(assistant_id, template.state)
    context = getattr(template, "context_schema", None)  # what a run's context may hold
    return {
        "graph_id": assistant_id,
        "input_schema": schema,
        "output_schema": schema,
        "state_schema": schema,
        "config_schema": None,
        "context_schema": None if context is None else state_schema(context.__name__, context),
    }
