"""Every route, as the server has it (new routes are covered by themselves): without a token,
with a revoked one, and with each scope. read < decide < admin."""

from __future__ import annotations

import re

import httpx
import pytest

from server_fixtures import SCOPES, Server
from stageline.config import load_settings
from stageline.ledger import Scope
from stageline.server import create_app, route_table

PUBLIC = {
    "/ok",
    # chat: each checks its own credential (Slack's signature; the link's HMAC)
    "/slack/commands",
    "/slack/interactions",
    "/slack/events",
    "/links/{token}",
    # GitHub's webhook: its X-Hub-Signature-256 HMAC authenticates it
    "/v1/github/webhook",
}
"""Routes that need no token, on purpose (health; chat, which Slack's signature or a signed
link authenticates). A new
route without ``require_scope`` fails ``test_every_route_but_the_public_ones_asks_for_a_scope``
until it is listed here."""


ROUTES = route_table(create_app(load_settings()))
"""(method, path, scope) of every route the app has."""
GUARDED = [(m, p, scope) for m, p, scope in ROUTES if p not in PUBLIC]
"""The routes a token guards: every one but the public ones."""
IDS = [f"{m} {p}" for m, p, _ in GUARDED]


def _url(path: str, run_id: str) -> str:
    values = {
        "run_id": run_id,
        "name": "ten_nodes",
        "thread_id": run_id,
        "assistant_id": "ten_nodes",
    }
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values.get(m.group(1), "x"), path)


@pytest.fixture(scope="module")
def done_run(server: Server) -> str:
    with server.client("admin") as client:
        answer = client.post(
            "/v1/runs", json={"template": "ten_nodes", "inputs": {"seed": 1}, "wait": True}
        )
    assert answer.status_code == 201, answer.text
    return str(answer.json()["run"]["run_id"])


@pytest.fixture(scope="module")
def revoked(server: Server) -> str:
    token = server.create_token("revoked-admin", "admin")
    server.cli("token", "revoke", "revoked-admin")
    return token


def test_every_route_but_the_public_ones_asks_for_a_scope() -> None:
    missing = [f"{m} {p}" for m, p, scope in ROUTES if scope is None and p not in PUBLIC]
    assert not missing, f"routes without require_scope: {missing}"


@pytest.mark.parametrize(("method", "path", "needed"), GUARDED, ids=IDS)
def test_route_refuses_no_token_and_a_revoked_one(
    server: Server, done_run: str, revoked: str, method: str, path: str, needed: Scope | None
) -> None:
    url = server.url + _url(path, done_run)
    for headers in (
        {},
        {"Authorization": f"Bearer {revoked}"},
        {"x-api-key": revoked},
        {"Authorization": "Bearer sl_not-a-token"},
    ):
        answer = httpx.request(method, url, headers=headers, json={}, timeout=60)
        assert answer.status_code == 401, (headers, answer.text)
        assert isinstance(answer.json()["detail"], str)


@pytest.mark.parametrize(("method", "path", "needed"), GUARDED, ids=IDS)
def test_route_admits_exactly_the_scopes_it_needs(
    server: Server, done_run: str, method: str, path: str, needed: Scope | None
) -> None:
    assert needed is not None, f"{method} {path} asks for no scope"
    url = server.url + _url(path, done_run)
    for scope in SCOPES:
        # An empty body: routes that take one refuse it (422) after the scope check, so
        # nothing is changed; the others act on a finished run (409) or only read.
        answer = httpx.request(method, url, headers=server.headers(scope), json={}, timeout=60)
        if Scope(scope).allows(needed):
            assert answer.status_code not in (401, 403), (scope, answer.text)
        else:
            assert answer.status_code == 403, (scope, answer.text)
            assert needed in answer.json()["detail"]


def test_read_cannot_decide_and_decide_cannot_cancel() -> None:
    scopes = {f"{m} {p}": scope for m, p, scope in ROUTES}
    assert scopes["POST /v1/runs/{run_id}/decide"] is Scope.DECIDE
    assert scopes["POST /v1/runs/{run_id}/answer"] is Scope.DECIDE
    assert scopes["POST /v1/runs/{run_id}/cancel"] is Scope.ADMIN
    assert scopes["POST /v1/runs/{run_id}/effects/settle"] is Scope.ADMIN
    assert scopes["POST /v1/prune"] is Scope.ADMIN
    assert scopes["POST /v1/runs/{run_id}/fork"] is Scope.ADMIN
    assert scopes["GET /v1/runs"] is Scope.READ
