"""``/assistants``: the built-in assistant of each template (``assistant_id`` = ``graph_id`` =
the template's name) and configured variants of a template made by ``assistants.create``,
kept in the ledger with their versions (see ``_assistants``).

Looking needs the ``read`` scope; making, changing and deleting assistants needs ``admin``
(an assistant is configuration every later run of it starts with). A built-in assistant is its
template: updating, deleting or re-versioning it is 409.
"""

from __future__ import annotations

import typing
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter

from stageline.errors import InvalidTransition
from stageline.ledger import Assistant
from stageline.runner import Runner
from stageline.server._auth import require_scope
from stageline.server._state import get_runner
from stageline.server.langgraph._assistants import (
    assistant_json,
    builtins,
    check_context,
    find_assistant,
    fixed,
    new_assistant_id,
    settings,
    version_json,
)
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._execute import thread_busy
from stageline.server.langgraph._lookup import known_assistant
from stageline.server.langgraph._mapping import jsonable, matches
from stageline.server.langgraph._models import (
    AssistantCreate,
    AssistantLatest,
    AssistantPatch,
    AssistantSearch,
    AssistantVersions,
)

__all__ = ["router", "state_schema"]

router = APIRouter(tags=["langgraph: assistants"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Admin = Annotated[str, Depends(require_scope("admin"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]


@router.post("/assistants", summary="Make an assistant: a template with its config and context")
async def create_assistant(body: AssistantCreate, runner: RunnerDep, _actor: Admin) -> Any:
    graph_id = known_assistant(runner, body.graph_id)
    assistant_id = new_assistant_id(runner, body.assistant_id)
    config, context = settings(body.config, body.context)
    check_context(runner, graph_id, context or {})
    made = Assistant(
        assistant_id=assistant_id,
        graph_id=graph_id,
        name=body.name or "Untitled",
        description=body.description,
        config=config,
        context=context or {},
        metadata=body.metadata or {},
    )
    try:
        kept = await runner.ledger.put_assistant(made, if_exists=body.if_exists or "raise")
    except InvalidTransition as exc:
        raise HTTPException(409, f"{exc}; pass if_exists='do_nothing' to get it") from exc
    return assistant_json(kept)


def _matching(found: list[Assistant], body: AssistantSearch) -> list[Assistant]:
    name = (body.name or "").lower()
    return [
        a
        for a in found
        if (body.graph_id is None or a.graph_id == body.graph_id)
        and name in a.name.lower()
        and matches(a.metadata, body.metadata or {})
    ]


async def _every(runner: Runner, body: AssistantSearch) -> list[Assistant]:
    if body.graph_id is not None:
        known_assistant(runner, body.graph_id)  # 404 for a template that is not there
    return _matching([*builtins(runner), *await runner.ledger.assistants(body.graph_id)], body)


@router.post("/assistants/search", summary="Assistants, filtered by graph_id, name or metadata")
async def search_assistants(body: AssistantSearch, runner: RunnerDep, _actor: Reader) -> Any:
    found = await _every(runner, body)
    key = body.sort_by or "created_at"  # newest first unless asked otherwise, as LangGraph
    found.sort(
        key=lambda a: getattr(a, key).lower() if key in ("name", "graph_id") else getattr(a, key),
        reverse=body.sort_order != "asc",
    )
    page = found[body.offset : body.offset + body.limit]
    rows = [assistant_json(a) for a in page]
    if body.select:
        rows = [{k: v for k, v in row.items() if k in body.select} for row in rows]
    more = len(found) > body.offset + body.limit
    headers = {"X-Pagination-Total": str(len(found))}
    if more:
        headers["X-Pagination-Next"] = str(body.offset + body.limit)
    return JSONResponse(rows, headers=headers)


@router.post("/assistants/count", summary="How many assistants match")
async def count_assistants(body: AssistantSearch, runner: RunnerDep, _actor: Reader) -> int:
    return len(await _every(runner, body))


@router.get("/assistants/{assistant_id}", summary="An assistant")
async def get_assistant(assistant_id: str, runner: RunnerDep, _actor: Reader) -> Any:
    return assistant_json(await find_assistant(runner, assistant_id))


@router.patch("/assistants/{assistant_id}", summary="Change an assistant: its next version")
async def update_assistant(
    assistant_id: str, body: AssistantPatch, runner: RunnerDep, _actor: Admin
) -> Any:
    fixed(runner, assistant_id, "updated")
    found = await find_assistant(runner, assistant_id)
    changes: dict[str, Any] = {}
    if body.graph_id is not None:
        changes["graph_id"] = known_assistant(runner, body.graph_id)
    config, context = settings(body.config, body.context)
    if config:  # an empty config keeps the one it had, as LangGraph's server does
        changes["config"] = config
    if context is not None:
        changes["context"] = context
    if body.metadata is not None:
        changes["metadata"] = {**found.metadata, **body.metadata}  # merged, as LangGraph does
    changes.update({k: getattr(body, k) for k in ("name", "description") if getattr(body, k)})
    check_context(
        runner, changes.get("graph_id", found.graph_id), changes.get("context", found.context)
    )
    return assistant_json(await runner.ledger.update_assistant(assistant_id, changes))


@router.delete("/assistants/{assistant_id}", status_code=204, summary="Delete an assistant")
async def delete_assistant(
    assistant_id: str,
    request: Request,
    runner: RunnerDep,
    _actor: Admin,
    delete_threads: Annotated[bool, Query()] = False,
) -> Response:
    fixed(runner, assistant_id, "deleted")
    await find_assistant(runner, assistant_id)
    if delete_threads:  # the threads its runs started, as LangGraph finds them: by metadata
        threads = [
            m.run_id
            for m in await runner.ledger.thread_metas()
            if m.metadata.get("assistant_id") == assistant_id
        ]
        busy = [t for t in threads if await thread_busy(request, runner, t)]
        if busy:
            raise HTTPException(409, f"threads {', '.join(busy)} are busy; cancel their runs first")
        for thread_id in threads:
            await runner.delete(thread_id)
    await runner.ledger.delete_assistant(assistant_id)
    for cron in await runner.ledger.crons(assistant_id=assistant_id):  # as LangGraph: its crons
        await runner.ledger.delete_cron(cron.cron_id)
    return Response(status_code=204)


@router.post("/assistants/{assistant_id}/versions", summary="An assistant's versions, newest first")
async def assistant_versions(
    assistant_id: str, body: AssistantVersions, runner: RunnerDep, _actor: Reader
) -> list[dict[str, Any]]:
    found = await find_assistant(runner, assistant_id)
    versions = await runner.ledger.assistant_versions(assistant_id) or [found]
    kept = [v for v in versions if matches(v.metadata, body.metadata or {})]
    return [version_json(v) for v in kept[body.offset : body.offset + body.limit]]


@router.post("/assistants/{assistant_id}/latest", summary="Make a version the assistant's own")
async def set_latest(
    assistant_id: str, body: AssistantLatest, runner: RunnerDep, _actor: Admin
) -> Any:
    fixed(runner, assistant_id, "re-versioned")
    await find_assistant(runner, assistant_id)
    return assistant_json(await runner.ledger.set_latest_assistant(assistant_id, body.version))


@router.get("/assistants/{assistant_id}/graph", summary="The template's graph: nodes and edges")
async def get_assistant_graph(
    assistant_id: str,
    runner: RunnerDep,
    _actor: Reader,
    xray: Annotated[int | bool, Query()] = False,
) -> dict[str, Any]:
    found = await find_assistant(runner, assistant_id)
    drawn = runner.graph(found.graph_id).get_graph(xray=xray)
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


def _io_schema(graph: Any, which: str, declared: type[Any] | None) -> dict[str, Any] | None:
    """The graph's input or output schema (its state's, unless it declares one of its own) as
    LangGraph describes it; where pydantic cannot (a ``typing.TypedDict`` on Python < 3.12,
    where LangGraph's server answers null), each key described as ``state_schema`` does."""
    try:
        return dict(jsonable(getattr(graph, f"get_{which}_jsonschema")()))
    except Exception:
        return None if declared is None else state_schema(declared.__name__, declared)


@router.get(
    "/assistants/{assistant_id}/schemas", summary="The template's input, output and state schemas"
)
async def get_assistant_schemas(
    assistant_id: str, runner: RunnerDep, _actor: Reader
) -> dict[str, Any]:
    graph_id = (await find_assistant(runner, assistant_id)).graph_id
    template = runner.load(graph_id)
    graph = runner.graph(graph_id)
    builder = getattr(graph, "builder", None)
    context = getattr(template, "context_schema", None)  # what a run's context may hold
    return {
        "graph_id": graph_id,
        "input_schema": _io_schema(graph, "input", getattr(builder, "input_schema", None)),
        "output_schema": _io_schema(graph, "output", getattr(builder, "output_schema", None)),
        "state_schema": state_schema(graph_id, template.state),
        "config_schema": None,
        "context_schema": None if context is None else state_schema(context.__name__, context),
    }


def _graph_schemas(graph: Any) -> dict[str, Any]:
    """A subgraph's schemas, from LangGraph's own public methods (None where one fails)."""

    def made(method: str) -> Any:
        try:
            return jsonable(getattr(graph, method)())
        except Exception:  # a schema LangGraph cannot describe
            return None

    builder = getattr(graph, "builder", None)
    state = getattr(builder, "state_schema", None)
    return {
        "input_schema": made("get_input_jsonschema"),
        "output_schema": made("get_output_jsonschema"),
        "state_schema": None if state is None else state_schema(graph.get_name(), state),
        "config_schema": None,
        "context_schema": made("get_context_jsonschema"),
    }


@router.get("/assistants/{assistant_id}/subgraphs", summary="The template's subgraphs' schemas")
@router.get("/assistants/{assistant_id}/subgraphs/{namespace}", summary="One subgraph's schemas")
async def get_assistant_subgraphs(
    assistant_id: str,
    runner: RunnerDep,
    _actor: Reader,
    namespace: str | None = None,
    recurse: Annotated[bool, Query()] = False,
) -> dict[str, Any]:
    found = await find_assistant(runner, assistant_id)
    graph = runner.graph(found.graph_id)
    return {
        ns: _graph_schemas(sub)
        async for ns, sub in graph.aget_subgraphs(namespace=namespace, recurse=recurse)
    }
