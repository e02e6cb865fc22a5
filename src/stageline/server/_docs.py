"""The API's own description: ``/openapi.json``, ``/docs`` (Swagger UI) and ``/redoc``.

Like every route but ``/ok`` they need a token (read scope). Swagger UI's and ReDoc's files
come from the ``fastapi-offline`` package (never a CDN). A browser has no bearer header: a
signed-in dashboard session reads the same pages at ``/ui/docs`` (see ``server.ui.apidocs``).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from stageline.server._auth import require_scope
from stageline.server._headers import csp_hash

__all__ = ["ASSETS_PATH", "install_docs", "swagger_page"]

ASSETS_PATH = "/docs/assets"
"""Swagger UI's and ReDoc's script and style files (static, no data: no token needed)."""

_DOCS_CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self' {scripts}; connect-src 'self'; worker-src 'self' blob:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""Swagger UI starts from an inline script (allowed by its hash, nothing else inline) and both
pages style themselves inline; they may load nothing from another host."""


def _with_csp(page: HTMLResponse) -> HTMLResponse:
    """``page`` with the docs' policy, its own inline scripts allowed by their hashes."""
    scripts = re.findall(rb"<script>(.*?)</script>", bytes(page.body), re.S)
    page.headers["Content-Security-Policy"] = _DOCS_CSP.format(
        scripts=" ".join(csp_hash(s) for s in scripts)
    )
    return page


def _assets() -> Path:
    """The folder of Swagger UI's and ReDoc's files (the ``fastapi-offline`` package)."""
    return Path(str(resources.files("fastapi_offline") / "static"))


def swagger_page(openapi_url: str, title: str) -> HTMLResponse:
    """Swagger UI over ``openapi_url``, its files served from this package."""
    page = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=title,
        swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
    )
    return _with_csp(page)


def install_docs(app: FastAPI) -> None:
    """``/openapi.json``, ``/docs`` and ``/redoc``, each for a token with read scope."""
    app.mount(ASSETS_PATH, StaticFiles(directory=_assets()), name="docs-assets")
    title = f"{app.title} API"
    reader = [Depends(require_scope("read"))]

    @app.get("/openapi.json", include_in_schema=False, dependencies=reader)
    async def openapi() -> JSONResponse:
        schema: dict[str, Any] = app.openapi()
        return JSONResponse(schema)

    @app.get("/docs", include_in_schema=False, dependencies=reader)
    async def swagger() -> HTMLResponse:
        return swagger_page("/openapi.json", title)

    @app.get("/redoc", include_in_schema=False, dependencies=reader)
    async def redoc() -> HTMLResponse:
        page = get_redoc_html(
            openapi_url="/openapi.json",
            title=title,
            redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
        return _with_csp(page)
