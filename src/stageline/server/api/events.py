"""A run's events: as JSON, and as a live server-sent-event stream.

The stream sends each event as ``id: SEQ``, ``event: KIND``, ``data: JSON``; a client that
reconnects with ``Last-Event-ID: SEQ`` (browsers' EventSource do it by themselves) gets what
came after. It ends once the run has ended (succeeded, failed, cancelled, rejected) and every
event is sent; while it waits for a person it stays open, with a comment every few seconds.

A ``Last-Event-ID`` is a seq, as ``after`` is (a whole number from 0 to 2**53); anything else
is refused with 422 before the stream starts (the stream only ever sends seqs as ids).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from stageline.ledger import EventCategory, RunStatus
from stageline.server._models import EventOut
from stageline.server.api._common import ERRORS, Reader, RunId, RunnerDep, jsonable

__all__ = ["router"]

router = APIRouter(prefix="/v1/runs/{run_id}/events", tags=["events"], responses=ERRORS)

POLL = 0.5
"""Seconds between two looks at the ledger when nothing woke the stream."""
KEEPALIVE = 15.0
MAX_SEQ = 2**53
"""The largest seq a request may name (``after``, ``Last-Event-ID``): the largest integer a
browser keeps exactly, well inside the ledger's 64-bit column."""
_ENDED = tuple(s for s in RunStatus if s.terminal or s is RunStatus.FAILED)

Categories = Annotated[
    list[EventCategory], Query(alias="category", description="Only these categories (repeat).")
]


@router.get(
    "",
    response_model=list[EventOut],
    summary="The run's events in order",
    responses={404: {"description": "No such run"}},
)
async def events(
    run_id: RunId,
    runner: RunnerDep,
    _: Reader,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="Only events after this seq.")] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    category: Categories = [],  # noqa: B006
) -> list[EventOut]:
    await runner.ledger.get_run(run_id)
    found = await runner.ledger.events(
        run_id, after=after, categories=[str(c) for c in category] or None
    )
    return [EventOut.model_validate(jsonable(e.to_dict())) for e in found[:limit]]


@router.get(
    "/stream",
    summary="The run's events, live (text/event-stream)",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
            "description": "Server-sent events: id = seq, event = kind",
        },
        404: {"description": "No such run"},
    },
)
async def stream(
    run_id: RunId,
    request: Request,
    runner: RunnerDep,
    _: Reader,
    after: Annotated[int, Query(ge=0, le=MAX_SEQ, description="Start after this seq.")] = 0,
    category: Categories = [],  # noqa: B006
    last_event_id: Annotated[
        int | None,
        Header(ge=0, le=MAX_SEQ, description="The last seq received: start after it (or after)."),
    ] = None,
) -> StreamingResponse:
    await runner.ledger.get_run(run_id)
    cursor = max(after, last_event_id or 0)
    kinds = [str(c) for c in category] or None
    notifier = request.app.state.notifier

    async def send() -> AsyncIterator[str]:
        nonlocal cursor
        yield "retry: 2000\n\n"
        quiet = 0.0
        while not await request.is_disconnected():
            current = await runner.ledger.get_run(run_id)  # before the events: none is missed
            batch = await runner.ledger.events(run_id, after=cursor, categories=kinds)
            for event in batch:
                cursor = max(cursor, event.seq)
                data = json.dumps(jsonable(event.to_dict()), separators=(",", ":"))
                yield f"id: {event.seq}\nevent: {event.kind}\ndata: {data}\n\n"
            if current.status in _ENDED and not batch:
                return
            if batch:
                quiet = 0.0
                continue
            if quiet >= KEEPALIVE:
                quiet = 0.0
                yield ": keep-alive\n\n"
            await notifier.wait(run_id, POLL)
            quiet += POLL

    return StreamingResponse(
        send(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
