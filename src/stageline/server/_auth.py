"""Who is calling: a token from ``Authorization: Bearer T`` or ``x-api-key: T``, and its scope.

Routes say what they need with ``require_scope("read" | "decide" | "admin")``; the dependency
returns the token's name, which is the actor of what the request does (a decision, a cancel).
``read`` looks; ``decide`` also starts runs, decides, answers, retries and resumes; ``admin``
also cancels, prunes, forks and settles effects.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from stageline.ledger import Scope, Token
from stageline.server._state import get_runner

__all__ = ["SCOPE_ATTRIBUTE", "authenticate", "require_scope", "route_scope", "route_table"]

SCOPE_ATTRIBUTE = "stageline_scope"
"""Set on each ``require_scope`` dependency: the scope it asks for (tests read it)."""

_bearer = HTTPBearer(auto_error=False, description="A stageline token: `stageline token create`")
_api_key = APIKeyHeader(name="x-api-key", auto_error=False,
                        description="The same token, as langgraph_sdk sends it")

_UNAUTHORIZED = {"WWW-Authenticate": "Bearer"}


async def authenticate(
    request: Request,
    bearer: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    api_key: Annotated[str | None, Depends(_api_key)],
) -> Token:
    """The caller's active token; 401 without one, or with an unknown or revoked one."""
    secret = bearer.credentials if bearer is not None else api_key
    if not secret:
        raise HTTPException(
            401, "missing token: send `Authorization: Bearer TOKEN` or `x-api-key: TOKEN` "
            "(make one with `stageline token create NAME --scope read|decide|admin`)",
            headers=_UNAUTHORIZED)
    if len(secret) > 200:
        raise HTTPException(401, "invalid token", headers=_UNAUTHORIZED)
    token = await get_runner(request).ledger.authenticate(secret)
    if token is None:
        raise HTTPException(401, "invalid or revoked token", headers=_UNAUTHORIZED)
    request.state.token = token
    return token


def require_scope(scope: Scope | str) -> Callable[..., Awaitable[str]]:
    """A dependency: the caller's token must allow ``scope``; returns the token's name."""
    needed = Scope(scope)

    async def dependency(token: Annotated[Token, Depends(authenticate)]) -> str:
        if not token.scope.allows(needed):
            raise HTTPException(
                403, f"token {token.name!r} has scope {token.scope}; this needs {needed} "
                "(read < decide < admin)")
        return token.name

    setattr(dependency, SCOPE_ATTRIBUTE, needed)
    dependency.__name__ = f"require_{needed}"
    return dependency


def route_table(app: Any) -> list[tuple[str, str, Scope | None]]:
    """Every HTTP route of ``app`` as ``(method, path, scope it requires or None)``, routers
    included (tests enumerate this, so a new route is covered by itself)."""
    try:
        from fastapi.routing import iter_route_contexts
    except ImportError:  # FastAPI before routers were kept as included objects
        contexts: Any = app.routes
    else:
        contexts = iter_route_contexts(app.routes)
    table: list[tuple[str, str, Scope | None]] = []
    for route in contexts:
        methods, path = getattr(route, "methods", None), getattr(route, "path", None)
        if not methods or not path or getattr(route, "dependant", None) is None:
            continue  # a mount (static files) or the schema
        for method in sorted(methods - {"HEAD"}):
            table.append((method, path, route_scope(route)))
    return table


def route_scope(route: Any) -> Scope | None:
    """The scope a route requires (None: it needs no token), read from its dependencies."""
    stack = list(getattr(getattr(route, "dependant", None), "dependencies", []))
    while stack:
        dep = stack.pop()
        found = getattr(dep.call, SCOPE_ATTRIBUTE, None)
        if found is not None:
            return Scope(found)
        stack.extend(dep.dependencies)
    return None
