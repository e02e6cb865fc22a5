"""The web dashboard at ``/ui/``: runs as pictures, deciding and answering from the browser.

Server-rendered pages (Jinja2) with a little plain JavaScript; every asset ships in this
package (``templates/``, ``static/``), so nothing is fetched from another host. The dashboard
is mounted as an app of its own: its pages sign in with a session cookie, not a bearer token.
"""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Route

from stageline.server.ui import actions, apidocs, auth, compose, overview, runs, schedules
from stageline.server.ui._session import SessionStore, SignInRequired
from stageline.server.ui._web import PREFIX, SECURITY_HEADERS, render

__all__ = ["PREFIX", "install_ui"]


async def _sign_in(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, SignInRequired)
    wants_page = "text/html" in request.headers.get("accept", "") and request.method == "GET"
    if not wants_page:
        return PlainTextResponse("sign in first", status_code=401, headers=SECURITY_HEADERS)
    from urllib.parse import quote

    return RedirectResponse(f"{PREFIX}/login?next={quote(exc.next_url, safe='/')}", status_code=303)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code in (403, 404, 405, 413, 422) and "text/html" in request.headers.get(
        "accept", ""
    ):
        return render(
            request,
            "error.html",
            None,
            status_code=exc.status_code,
            message=str(exc.detail),
            code=exc.status_code,
        )
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=SECURITY_HEADERS)


def _dashboard(host: FastAPI) -> FastAPI:
    ui = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    ui.state.host = host
    ui.state.sessions = SessionStore()
    ui.add_exception_handler(SignInRequired, _sign_in)
    ui.add_exception_handler(StarletteHTTPException, _http_error)
    static = resources.files("stageline.server.ui") / "static"
    ui.mount("/static", StaticFiles(directory=str(static)), name="static")
    for module in (auth, runs, actions, overview, schedules, compose, apidocs):
        ui.include_router(module.router)
    return ui


async def _home(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/", status_code=307)


def install_ui(app: FastAPI) -> None:
    """Mount the dashboard at ``/ui`` and send ``/`` there (a plain route: it needs no token
    and serves no data)."""
    app.mount(PREFIX, _dashboard(app), name="ui")
    app.router.routes.append(Route("/", _home, methods=["GET"], include_in_schema=False))
