"""The error responses every LangGraph-compatible route declares in the OpenAPI schema."""

from __future__ import annotations

from stageline.server._models import ErrorOut
from stageline.server.api._common import ERRORS, Responses

__all__ = ["LANGGRAPH_ERRORS"]

LANGGRAPH_ERRORS: Responses = {
    **ERRORS,
    404: {"model": ErrorOut, "description": "No such assistant, thread, run or checkpoint"},
    409: {"model": ErrorOut, "description": "The request does not fit the thread's state"},
    422: {
        "model": ErrorOut,
        "description": "A malformed body (the fields' paths), or a value that does not fit: "
        "an unknown state key, a bad answer or decision",
    },
}
