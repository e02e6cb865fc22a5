"""The HTTP API's routers, one module per resource; ``ROUTERS`` is what the app includes."""

from __future__ import annotations

from fastapi import APIRouter

from stageline.server.api import health, tokens

__all__ = ["ROUTERS"]

ROUTERS: list[APIRouter] = [health.router, tokens.router]
