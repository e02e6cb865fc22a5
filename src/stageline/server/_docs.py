"""``/docs`` and ``/redoc`` served offline: Swagger UI and ReDoc from a package, not a CDN."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["ASSETS_PATH", "install_docs"]

ASSETS_PATH = "/docs/assets"


def _assets() -> Path | None:
    """The folder of Swagger UI's and ReDoc's files (the ``fastapi-offline`` package)."""
    try:
        folder = Path(str(resources.files("fastapi_offline") / "static"))
    except ModuleNotFoundError:
        return None
    return folder if (folder / "swagger-ui-bundle.js").is_file() else None


def install_docs(app: FastAPI) -> None:
    """``/docs`` (Swagger UI) and ``/redoc``, no token needed (the schema is no secret)."""
    folder = _assets()
    if folder is None:  # the assets are missing: FastAPI's own pages, from its CDN
        app.docs_url, app.redoc_url = "/docs", "/redoc"
        app.setup()
        return
    app.mount(ASSETS_PATH, StaticFiles(directory=folder), name="docs-assets")
    title = f"{app.title} API"

    @app.get("/docs", include_in_schema=False)
    async def swagger() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=title,
            swagger_js_url=f"{ASSETS_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS_PATH}/favicon.png",
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(
            openapi_url=app.openapi_url or "/openapi.json",
            title=title,
            redoc_js_url=f"{ASSETS_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{ASSETS_PATH}/favicon.png",
            with_google_fonts=False,
        )
