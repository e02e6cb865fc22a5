"""The API's description for a signed-in browser: Swagger UI at ``/ui/docs`` over
``/ui/openapi.json`` (the session cookie stands in for the bearer token ``/docs`` needs)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse

from stageline.server._docs import swagger_page
from stageline.server.ui._web import PREFIX, Viewer

__all__ = ["router"]

router = APIRouter()


@router.get("/openapi.json")
async def openapi(request: Request, session: Viewer) -> JSONResponse:
    schema: dict[str, Any] = request.app.state.host.openapi()
    return JSONResponse(schema)


@router.get("/docs")
async def docs(request: Request, session: Viewer) -> HTMLResponse:
    return swagger_page(f"{PREFIX}/openapi.json", "stageline API")
