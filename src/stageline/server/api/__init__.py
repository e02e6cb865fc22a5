"""The HTTP API's routers, one module per resource; ``ROUTERS`` is what the app includes."""

from __future__ import annotations

from fastapi import APIRouter

from stageline.server.api import (
    architect,
    effects,
    events,
    health,
    history,
    prune,
    runs,
    stats,
    templates,
    tokens,
    waits,
)

__all__ = ["ROUTERS"]

ROUTERS: list[APIRouter] = [
    health.router,
    tokens.router,
    runs.router,
    waits.router,
    events.router,
    effects.router,
    templates.router,
    stats.router,
    architect.router,
    prune.router,
    history.router,
]
