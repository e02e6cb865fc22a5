"""Errors as JSON: every stageline error maps to its ``http_status`` with ``{"detail": ...}``.

Nothing the server answers carries a traceback: an unexpected exception is logged on the server
and the client gets a 500 that says only that. A request that does not fit its route's
parameters or body gets FastAPI's 422 (the fields' paths), always as strict JSON: the values it
echoes are made plain first (``NaN`` becomes ``"NaN"``), so building the answer cannot fail.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from stageline.errors import AnswerInvalid, InputError, StagelineError
from stageline.server._headers import SAFE_HEADERS

__all__ = ["ErrorBody", "install_error_handlers", "strict_json"]

_log = logging.getLogger("stageline.server")

ErrorBody = dict[str, str]


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


async def _stageline_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StagelineError)
    if isinstance(exc, InputError | AnswerInvalid):  # input that does not fit: as FastAPI's 422
        where = "body" if request.method in ("POST", "PUT", "PATCH") else "query"
        return JSONResponse(
            {
                "detail": [{"loc": [where], "msg": str(exc), "type": "value_error"}],
                "error": type(exc).__name__,
            },
            status_code=422,
        )
    status = exc.http_status if 400 <= exc.http_status < 600 else 500
    if status >= 500 and status != 503:
        _log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse(
        {"detail": str(exc) or type(exc).__name__, "error": type(exc).__name__}, status_code=status
    )


def strict_json(value: Any) -> Any:
    """``value`` as data strict JSON can carry: a non-finite float as its name (``"NaN"``,
    ``"Infinity"``, ``"-Infinity"``), bytes decoded, any other object as its text."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [strict_json(v) for v in value]
    return str(value)


async def _invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return JSONResponse({"detail": strict_json(exc.errors())}, status_code=422)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    _log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
    return JSONResponse(
        {
            "detail": f"internal error ({type(exc).__name__}); the server log has the details",
            "error": "InternalError",
        },
        status_code=500,
        headers=SAFE_HEADERS,  # made outside the app's middleware: it must carry them itself
    )


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(StagelineError, _stageline_error)
    app.add_exception_handler(Exception, _unexpected)
