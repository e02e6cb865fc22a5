"""Property tests against the served OpenAPI schema (schemathesis, loopback only): for every
operation, a bounded number of generated requests; no 5xx, no response that breaks the schema
or answers with a status the schema does not declare.

Besides what schemathesis generates from the schema, about half the requests carry a hostile
number in one place: NaN, an infinity or an integer past 64 bits in a body field (set or
added, at any depth, or as the whole body), or ``nan``, ``inf``, ``1e400`` or a 31-digit
integer in a query parameter. JSON bodies are written as Python writes them, ``NaN`` and
``Infinity`` included, so the server sees what a careless or hostile client sends.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from server_fixtures import Server

MAX_EXAMPLES = 6
"""Examples per operation: keeps the whole test within a couple of minutes on CI."""
HOSTILE_NUMBERS: list[Any] = [math.nan, math.inf, -math.inf, 10**30, -(10**30), 2**63, 2**64]
"""Body values no field or column can hold."""
HOSTILE_TEXT = ["nan", "NaN", "inf", "-Infinity", "1e400", str(10**30), str(-(2**63) - 1)]
"""Query values that read as such numbers."""

Path = tuple[str | int, ...]


@schemathesis.serializer("application/json")
def _json_as_python_writes_it(ctx: schemathesis.SerializationContext, value: Any) -> bytes:
    """JSON bodies with ``NaN`` and ``Infinity`` as Python writes them (the default refuses)."""
    return value if isinstance(value, bytes) else json.dumps(value).encode()


def _paths(value: Any, path: Path = ()) -> Iterator[Path]:
    """Every place in ``value``: itself, then each member of each object and array."""
    yield path
    if isinstance(value, dict):
        for key, member in value.items():
            yield from _paths(member, (*path, key))
    elif isinstance(value, list):
        for index, member in enumerate(value):
            yield from _paths(member, (*path, index))


def _put(value: Any, path: Path, new: Any) -> Any:
    """A copy of ``value`` with ``new`` at ``path`` (an object gets the key if it lacks it)."""
    if not path:
        return new
    copied = copy.deepcopy(value)
    parent = copied
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = new
    return copied


def _ref(raw: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        schema = raw["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    return schema


def _fields(raw: dict[str, Any]) -> dict[tuple[str, str], tuple[list[str], list[str]]]:
    """(METHOD, path) -> (its JSON body's top-level properties, its query parameters)."""
    found = {}
    for path, operations in raw["paths"].items():
        for method, operation in operations.items():
            content = operation.get("requestBody", {}).get("content", {})
            schema = content.get("application/json", {}).get("schema", {})
            properties: list[str] = []
            for option in [schema, *schema.get("anyOf", [])]:
                properties += list(_ref(raw, option).get("properties", {}))
            query = [p["name"] for p in operation.get("parameters", []) if p["in"] == "query"]
            found[(method.upper(), path)] = (properties, query)
    return found


def _add_hostile_numbers(loaded: Any) -> None:
    """Hooks on ``loaded``: each generated body or query, or it with one hostile number."""
    fields = _fields(loaded.raw_schema)

    def of(context: schemathesis.HookContext) -> tuple[list[str], list[str]]:
        operation = context.operation
        assert operation is not None
        return fields.get((operation.method.upper(), operation.path), ([], []))

    @loaded.hook
    def flatmap_body(context: schemathesis.HookContext, body: Any) -> st.SearchStrategy[Any]:
        places = list(_paths(body))
        if isinstance(body, dict):
            places += [(name,) for name in of(context)[0] if name not in body]
        hostile = st.tuples(st.sampled_from(places), st.sampled_from(HOSTILE_NUMBERS))
        return st.one_of(st.just(body), hostile.map(lambda pn: _put(body, *pn)))

    @loaded.hook
    def flatmap_query(
        context: schemathesis.HookContext, query: dict[str, Any] | None
    ) -> st.SearchStrategy[dict[str, Any] | None]:
        names = of(context)[1]
        if not names or not isinstance(query, dict | None):
            return st.just(query)
        given = query or {}
        hostile = st.tuples(st.sampled_from(names), st.sampled_from(HOSTILE_TEXT))
        return st.one_of(st.just(query), hostile.map(lambda nv: {**given, nv[0]: nv[1]}))


@pytest.fixture(scope="module")
def api_schema(server: Server) -> Any:
    with server.client("decide") as client:  # a few real runs for generated ids to miss or hit
        client.post("/v1/runs", json={"template": "ten_nodes", "inputs": {}, "wait": True})
        client.post(
            "/v1/runs", json={"template": "blog_post", "inputs": {"topic": "t"}, "wait": True}
        )
    loaded = schemathesis.openapi.from_url(
        f"{server.url}/openapi.json", headers=server.headers("read")
    )
    _add_hostile_numbers(loaded)
    # A live event stream stays open while its run waits: it is tested on its own.
    return loaded.exclude(path_regex=r"/events/stream$")


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_keeps_its_schema(case: Any, server: Server) -> None:
    case.call_and_validate(
        headers=server.headers("admin"),
        timeout=60,
        checks=[
            not_a_server_error,
            response_schema_conformance,
            status_code_conformance,
            content_type_conformance,
        ],
    )
