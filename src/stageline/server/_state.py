"""What the app holds for its routes: the one runner, the advancer and the server config."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fastapi import Request

if TYPE_CHECKING:
    from stageline.runner import Runner
    from stageline.server._advancer import Advancer
    from stageline.server._config import ServerConfig

__all__ = ["get_advancer", "get_config", "get_runner"]


def get_runner(request: Request) -> Runner:
    """The runner the app opened at start-up (a FastAPI dependency)."""
    runner: Runner = request.app.state.runner
    return runner


def get_advancer(request: Request) -> Advancer:
    """What advances runs in the background and survives a restart (a FastAPI dependency)."""
    advancer: Advancer = request.app.state.advancer
    return advancer


def get_config(request: Request) -> ServerConfig:
    config: ServerConfig = request.app.state.config
    return config
