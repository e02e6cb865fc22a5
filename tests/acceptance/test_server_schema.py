"""Property tests against the served OpenAPI schema (schemathesis, loopback only): for every
operation, a bounded number of generated requests; no 5xx, no response that breaks the schema
or answers with a status the schema does not declare."""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from server_fixtures import Server

MAX_EXAMPLES = 6
"""Examples per operation: keeps the whole test within a couple of minutes on CI."""


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
