"""``/store``: LangGraph's key-value store (``client.store``), the same store the graphs' nodes
read and write (``runtime.store``, ``ctx.store``), on the project's database.

Answers as LangGraph's server does: a missing item is ``null`` (200, not 404); put and delete
answer 204. A ``read`` token gets, searches and lists; putting and deleting need ``decide``
(what a person or a run does). A namespace label that is empty or holds a ``.`` is a 422, as
is what the database cannot hold (NUL characters, lone surrogates, numbers past 64 bits) and a
filter the store refuses (an unknown ``$`` operator).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response
from langgraph.store.base import InvalidNamespaceError
from pydantic import BaseModel, ConfigDict, Field

from stageline.errors import InputError
from stageline.plaindata import check_plain_inputs
from stageline.runner import Runner
from stageline.server._auth import require_scope
from stageline.server._state import get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS

__all__ = ["router"]

router = APIRouter(tags=["langgraph: store"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]

_LOOSE = ConfigDict(extra="ignore")
_OFFSET = Field(0, ge=0, le=1_000_000)
_LIMIT = 2**63
"""Numbers the store's JSON holds: 64-bit integers."""


class StorePut(BaseModel):
    """``index`` and ``ttl`` are accepted and ignored, as LangGraph's server does."""

    model_config = _LOOSE
    namespace: list[str]
    key: str = Field(min_length=1)
    value: dict[str, Any]
    index: Any = None
    ttl: float | None = None


class StoreDelete(BaseModel):
    model_config = _LOOSE
    namespace: list[str]
    key: str = Field(min_length=1)


class StoreSearch(BaseModel):
    model_config = _LOOSE
    namespace_prefix: list[str] = Field(default_factory=list)
    filter: dict[str, Any] | None = None
    limit: int = Field(10, ge=1, le=1000)
    offset: int = _OFFSET
    query: str | None = None
    refresh_ttl: bool | None = None


class NamespaceList(BaseModel):
    model_config = _LOOSE
    prefix: list[str] | None = None
    suffix: list[str] | None = None
    max_depth: int | None = Field(None, ge=1, le=1000)
    limit: int = Field(100, ge=1, le=1000)
    offset: int = _OFFSET


def _checked(**fields: Any) -> None:
    """``InputError`` (422) for a field the database cannot hold (``check_plain_inputs``, and
    integers past 64 bits), naming it."""
    check_plain_inputs(fields, "field")
    for name, value in fields.items():
        if _huge(value):
            raise InputError(f"field {name!r} holds an integer past 64 bits")


def _huge(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return not -_LIMIT <= value < _LIMIT
    if isinstance(value, Mapping):
        return any(_huge(v) for v in value.values())
    return isinstance(value, list) and any(_huge(v) for v in value)


def _namespace(labels: list[str] | tuple[str, ...], *, empty: bool = False) -> tuple[str, ...]:
    """The labels as a namespace; ``InputError`` (422) for an empty one or one with a dot."""
    _checked(namespace=list(labels))
    if not labels and not empty:
        raise InputError("the namespace is empty; give at least one label")
    for label in labels:
        if not label or "." in label:
            raise InputError(
                f"namespace labels cannot be empty or contain periods; got {list(labels)}"
            )
    return tuple(labels)


@router.put("/store/items", status_code=204, summary="Store or update an item")
async def put_item(body: StorePut, runner: RunnerDep, _actor: Decider) -> Response:
    _checked(key=body.key, value=body.value)
    try:
        await runner.store.aput(_namespace(body.namespace), body.key, body.value)
    except InvalidNamespaceError as exc:  # LangGraph's own rules (a reserved first label)
        raise InputError(str(exc)) from exc
    return Response(status_code=204)


@router.get("/store/items", summary="An item, or null when there is none")
async def get_item(
    runner: RunnerDep,
    _actor: Reader,
    key: Annotated[str, Query(min_length=1)],
    namespace: Annotated[str, Query(description="The labels joined by '.'")] = "",
) -> dict[str, Any] | None:
    _checked(key=key)
    item = await runner.store.aget(_namespace(namespace.split(".") if namespace else []), key)
    return item.dict() if item is not None else None


@router.delete("/store/items", status_code=204, summary="Delete an item (none: nothing to do)")
async def delete_item(body: StoreDelete, runner: RunnerDep, _actor: Decider) -> Response:
    _checked(key=body.key)
    await runner.store.adelete(_namespace(body.namespace), body.key)
    return Response(status_code=204)


@router.post("/store/items/search", summary="Items under a namespace prefix, filtered by value")
async def search_items(body: StoreSearch, runner: RunnerDep, _actor: Reader) -> dict[str, Any]:
    prefix = _namespace(body.namespace_prefix, empty=True)
    _checked(filter=body.filter, query=body.query)
    try:
        found = await runner.store.asearch(
            prefix, filter=body.filter, limit=body.limit, offset=body.offset, query=body.query
        )
    except ValueError as exc:  # the store's own filter rules: "Unsupported operator: $foo"
        raise InputError(f"filter: {str(exc).splitlines()[0]}") from exc
    return {"items": [item.dict() for item in found]}


@router.post("/store/namespaces", summary="The namespaces, by prefix, suffix and depth")
async def list_namespaces(body: NamespaceList, runner: RunnerDep, _actor: Reader) -> dict[str, Any]:
    found = await runner.store.alist_namespaces(
        prefix=_namespace(body.prefix) if body.prefix else None,
        suffix=_namespace(body.suffix) if body.suffix else None,
        max_depth=body.max_depth,
        limit=body.limit,
        offset=body.offset,
    )
    return {"namespaces": [list(ns) for ns in found]}
