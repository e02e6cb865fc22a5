"""The app factory: one FastAPI app over one runner, opened at start-up and closed at exit."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from importlib.metadata import PackageNotFoundError, version

from fastapi import FastAPI

from stageline.config import Settings, load_settings
from stageline.ledger import commit_off_the_loop
from stageline.runner import ForgeAccess, Runner
from stageline.server._advancer import Advancer
from stageline.server._config import ServerConfig
from stageline.server._docs import install_docs
from stageline.server._errors import install_error_handlers
from stageline.server._headers import SecurityHeaders
from stageline.server._limits import BodyLimit, StrictJson
from stageline.server._notify import RunNotifier
from stageline.server.api import ROUTERS
from stageline.server.chat import chat_running, install_chat
from stageline.server.forge import forge_running, install_forge
from stageline.server.langgraph import ROUTERS as LANGGRAPH_ROUTERS
from stageline.server.ui import install_ui

__all__ = ["create_app"]


def _version() -> str:
    try:
        return version("stageline")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


def create_app(
    settings: Settings | None = None,
    *,
    runner: Runner | None = None,
    recover_every: float | None = None,
) -> FastAPI:
    """The ASGI app of ``stageline serve``.

    It opens a runner over the configured database when it starts (or uses ``runner``, which
    the caller then owns and closes) and an ``Advancer`` that advances runs in the background;
    routes reach both through ``get_runner`` and ``get_advancer``.
    """
    settings = settings or (runner.settings if runner is not None else load_settings())
    config = ServerConfig.of(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if runner is None:  # a server's many clients: the loop serves them while SQLite syncs
                commit_off_the_loop()
            # GitHub: one access (settings, one client) for the process, the runner's forge
            # service and CI polls and the server's webhook, issue poll and comments alike;
            # closed once, after the runner. A runner given is its caller's, with its own.
            forge: ForgeAccess | None = app.state.forge_access
            if runner is not None and runner.services.forge is not None:
                forge = runner.services.forge
            elif forge is not None:
                stack.push_async_callback(forge.aclose)
            opened = (
                runner
                if runner is not None
                else await stack.enter_async_context(Runner.open(settings, forge=forge))
            )
            advancer = (
                Advancer(opened)
                if recover_every is None
                else Advancer(opened, recover_every=recover_every)
            )
            app.state.runner = opened
            app.state.advancer = advancer
            opened.bus.add(app.state.notifier)
            await advancer.start()
            stack.push_async_callback(advancer.aclose)
            await stack.enter_async_context(chat_running(app, opened))  # Slack, decision links
            await stack.enter_async_context(forge_running(app, opened, advancer, forge))
            yield

    app = FastAPI(
        title="stageline",
        version=_version(),
        summary="Durable pipelines for LLM agents: runs, gates, questions, events.",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,  # served by install_docs, behind a token
    )
    app.state.settings = settings
    app.state.config = config
    app.state.notifier = RunNotifier()
    install_error_handlers(app)
    install_docs(app)
    for router in [*ROUTERS, *LANGGRAPH_ROUTERS]:
        app.include_router(router)
    install_ui(app)  # the dashboard at /ui/ (its own session auth); / redirects there
    install_chat(app)
    install_forge(app)  # POST /v1/github/webhook: GitHub's signature, no token
    app.add_middleware(StrictJson)  # inside BodyLimit: it reads bodies already bounded
    app.add_middleware(BodyLimit, max_bytes=config.max_body_bytes)
    app.add_middleware(SecurityHeaders)  # outermost: every response, a 413 too, gets them
    return app
