"""LangGraph's v3 thread streams (``client.threads.stream``), over HTTP and server-sent events.

``POST /threads/{id}/commands`` takes one protocol command (``{"id", "method", "params"}``,
``_v3_commands``) and answers ``{"type": "success", ...}`` or ``{"type": "error", ...}``.
``POST /threads/{id}/stream/events`` streams the thread's events (``_v3``) in the channels
asked for, until the client closes it. ``threads_socket`` serves the same over a WebSocket.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import JSONResponse, StreamingResponse

from stageline.runner import Runner
from stageline.server._advancer import Advancer
from stageline.server._auth import require_scope
from stageline.server._state import get_advancer, get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._lookup import find_thread
from stageline.server.langgraph._v3 import Feeds, Filter
from stageline.server.langgraph._v3_commands import Refused, dispatch

__all__ = ["HEARTBEAT", "router"]

router = APIRouter(tags=["langgraph: thread streams (v3)"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]
AdvancerDep = Annotated[Advancer, Depends(get_advancer)]
HEARTBEAT = 10.0
"""Seconds between two heartbeat comments on a stream with no events."""


async def _json_body(request: Request) -> Any:
    try:
        return json.loads(await request.body())
    except ValueError:
        raise HTTPException(400, "Invalid JSON body") from None


@router.post("/threads/{thread_id}/commands", summary="A v3 thread-stream protocol command")
async def command(
    thread_id: str, request: Request, runner: RunnerDep, advancer: AdvancerDep, actor: Decider
) -> JSONResponse:
    payload = await _json_body(request)
    try:
        return JSONResponse(await dispatch(request, runner, advancer, thread_id, payload, actor))
    except Refused as refused:
        return JSONResponse(refused.answer, status_code=refused.status)


@router.post(
    "/threads/{thread_id}/stream/events",
    summary="The thread's v3 protocol events in the channels asked for (server-sent events)",
)
async def stream_events(
    thread_id: str, request: Request, runner: RunnerDep, _actor: Reader
) -> StreamingResponse:
    asked = Filter.of(await _json_body(request))
    if isinstance(asked, str):
        raise HTTPException(400, asked)
    await find_thread(runner, thread_id)  # 404 for a thread that does not exist
    feed = Feeds.of(request).feed(thread_id)

    async def events() -> AsyncIterator[bytes]:
        async for event in asked.follow(feed, HEARTBEAT):
            if event is None:
                yield b": heartbeat\n\n"
            else:
                data = json.dumps(event, separators=(",", ":"))
                yield f"event: {event['method']}\ndata: {data}\nid: {event['seq']}\n\n".encode()

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )
