"""``stageline serve``: the HTTP API, the dashboard and chat, as views over the one runner.

Build on: ``create_app(settings)`` (the app), ``require_scope("read"|"decide"|"admin")`` (a
dependency returning the caller's token name, the actor), ``get_runner`` and ``get_advancer``
(dependencies giving the runner and the background advancer).
"""

from __future__ import annotations

from stageline.server._advancer import Advancer
from stageline.server._app import create_app
from stageline.server._auth import authenticate, require_scope, route_scope, route_table
from stageline.server._config import DEFAULT_HOST, DEFAULT_PORT, MAX_BODY_BYTES, ServerConfig
from stageline.server._state import get_advancer, get_config, get_runner

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "MAX_BODY_BYTES",
    "Advancer",
    "ServerConfig",
    "authenticate",
    "create_app",
    "get_advancer",
    "get_config",
    "get_runner",
    "require_scope",
    "route_scope",
    "route_table",
]
