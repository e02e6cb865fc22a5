"""``stageline serve``: the HTTP API over the runner (FastAPI on uvicorn, imported here only)."""

from __future__ import annotations

import contextlib
import ipaddress
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.errors import ConflictError

if TYPE_CHECKING:
    from stageline.config import Settings

__all__ = ["serve", "worker_app"]

DEFAULT_HOST = "127.0.0.1"  # stageline.server's own; not imported: it pulls in fastapi
DEFAULT_PORT = 8484
STARTUP_FAILURE = 3
"""The exit code when the server could not start (uvicorn's own)."""
GRACEFUL_SHUTDOWN = 10
"""Seconds uvicorn waits for open requests (event streams) at shutdown before it closes them."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.strip().lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


async def _has_tokens(settings: Settings) -> bool:
    from stageline.checkpoints import checkpoint_serde
    from stageline.ledger import open_backend

    backend = await open_backend(settings.database_url, checkpoint_serde())
    try:
        return await backend.ledger.has_tokens()
    finally:
        await backend.aclose()


def serve(
    host: Annotated[
        str, typer.Option("--host", metavar="HOST", help="The address to listen on.")
    ] = DEFAULT_HOST,
    port: Annotated[
        int, typer.Option("--port", metavar="PORT", min=0, max=65535, help="The port to listen on.")
    ] = DEFAULT_PORT,
    log_level: Annotated[
        str, typer.Option("--log-level", metavar="LEVEL", help="uvicorn's log level.")
    ] = "info",
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers",
            metavar="N",
            min=1,
            max=64,
            help="Server processes behind the port, sharing the database "
            "([server] workers, default 1).",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) over this project's runs.

    Every route but GET /ok needs a token (`stageline token create`). Runs started through the
    server are advanced by it in the background and picked up again after a restart.
    """
    settings = load_settings()
    processes = workers if workers is not None else settings.server.workers
    if not is_loopback(host) and not run_async(_has_tokens(settings)):
        raise ConflictError(
            f"refusing to listen on {host}: no API token exists yet. Create one first "
            "(`stageline token create NAME --scope admin`), or listen on 127.0.0.1 only"
        )
    import uvicorn

    from stageline.cli._logs import redact_logs

    if processes > 1:
        from stageline.cli._serve_processes import serve_processes

        code = serve_processes(
            host,
            port,
            log_level.lower(),
            processes,
            graceful=GRACEFUL_SHUTDOWN,
            startup_failure=STARTUP_FAILURE,
        )
        if code:
            raise typer.Exit(code)
        return
    from stageline.server import create_app

    config = uvicorn.Config(
        create_app(settings),
        host=host,
        port=port,
        log_level=log_level.lower(),
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
        server_header=False,
    )
    redact_logs()  # after uvicorn set its loggers up: link tokens never reach the access log
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    if not server.started:
        raise typer.Exit(STARTUP_FAILURE)  # uvicorn said why (the port is taken, ...)


def worker_app() -> Any:
    """The app of one of ``serve --workers N``'s processes (uvicorn calls this in each, in the
    project folder and environment the command was started in)."""
    from stageline.cli._logs import redact_logs
    from stageline.server import create_app

    redact_logs()  # uvicorn set this process's loggers up before it called us
    return create_app(load_settings())
