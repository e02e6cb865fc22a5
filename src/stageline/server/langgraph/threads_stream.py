"""LangGraph's v3 thread streams (``client.threads.stream``), over HTTP and server-sent events.

``POST /threads/{id}/commands`` takes one protocol command (``{"id", "method", "params"}``)
and answers ``{"type": "success", ...}`` or ``{"type": "error", "error": <code>, ...}``:
``run.start`` starts a run on the thread (made when it does not exist), ``input.respond``
answers an interrupt it waits on (a gate's decision, a question set's answers, an
``interrupt()``'s value: decided and audited as every resume is). ``POST
/threads/{id}/stream/events`` streams the thread's events (``_v3``) in the channels asked for,
until the client closes it. The WebSocket transport is not served: its upgrade is refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request, WebSocket
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import ValidationError

from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.server._advancer import Advancer
from stageline.server._auth import require_scope
from stageline.server._state import get_advancer, get_runner
from stageline.server.langgraph._errors import LANGGRAPH_ERRORS
from stageline.server.langgraph._execute import ApiRuns
from stageline.server.langgraph._lookup import find_thread
from stageline.server.langgraph._mapping import assistant_of
from stageline.server.langgraph._models import CommandBody, RunCreate
from stageline.server.langgraph._v3 import CHANNELS, Feeds, wanted
from stageline.server.langgraph.runs import accept_run

__all__ = ["router"]

router = APIRouter(tags=["langgraph: thread streams (v3)"], responses=LANGGRAPH_ERRORS)
Reader = Annotated[str, Depends(require_scope("read"))]
Decider = Annotated[str, Depends(require_scope("decide"))]
RunnerDep = Annotated[Runner, Depends(get_runner)]
AdvancerDep = Annotated[Advancer, Depends(get_advancer)]
HEARTBEAT = 10.0
"""Seconds between two heartbeat comments on a stream with no events."""
MODES = ["values", "updates"]
"""The stream modes of an API run a v3 command starts (its events on the thread's feed)."""
_CODES = {403: "permission_denied"}


def _error(command_id: Any, code: str, message: str, status: int = 200) -> JSONResponse:
    return JSONResponse(
        {"type": "error", "id": command_id, "error": code, "message": message},
        status_code=status,
    )


def _refused(command_id: Any, exc: HTTPException) -> JSONResponse:
    """A refused request as the protocol's error, its HTTP status leading the message."""
    code = _CODES.get(exc.status_code, "unknown_error")
    return _error(command_id, code, f"{exc.status_code}: {exc.detail}")


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
    if (
        not isinstance(payload, dict)
        or not isinstance(payload.get("id"), int)
        or not isinstance(payload.get("method"), str)
    ):
        return _error(
            payload.get("id") if isinstance(payload, dict) else None,
            "invalid_argument",
            "Protocol commands must include an integer id and string method.",
            400,
        )
    command_id, method = payload["id"], payload["method"]
    given = payload.get("params")
    params: dict[str, Any] = given if isinstance(given, dict) else {}
    if method == "run.start":
        body = _run_start(command_id, params)
    elif method == "input.respond":
        body = await _input_respond(runner, thread_id, command_id, params)
    elif method in ("agent.getTree", "subscription.subscribe", "subscription.unsubscribe"):
        return _error(
            command_id,
            "not_supported",
            f"{method} is not served over HTTP; stageline's thread streams take run.start "
            "and input.respond, and a stream's channels are asked for when it opens",
        )
    else:
        return _error(command_id, "unknown_command", f"Unknown protocol command: {method}")
    if isinstance(body, JSONResponse):
        return body
    try:
        api_run, task, _start = await accept_run(request, runner, advancer, body, thread_id, actor)
    except HTTPException as exc:
        return _refused(command_id, exc)
    run = await runner.ledger.get_run(thread_id)
    log = ApiRuns.of(request).log_of(api_run.api_run_id)
    before = Feeds.of(request).follow(runner, api_run, task, log, assistant_of(run))
    result = {"run_id": api_run.api_run_id} if method == "run.start" else {}
    return JSONResponse(
        {
            "type": "success",
            "id": command_id,
            "result": result,
            "meta": {"applied_through_seq": before},
        }
    )


def _run_start(command_id: int, params: dict[str, Any]) -> RunCreate | JSONResponse:
    assistant_id = params.get("assistant_id")
    if not isinstance(assistant_id, str) or not assistant_id:
        return _error(command_id, "invalid_argument", "run.start requires an assistant_id.")
    try:
        return RunCreate(
            assistant_id=assistant_id,
            input=params.get("input"),
            metadata=params.get("metadata"),
            stream_mode=MODES,
            if_not_exists="create",
        )
    except ValidationError as exc:
        return _error(command_id, "invalid_argument", f"run.start: {_first(exc)}")


def _first(exc: ValidationError) -> str:
    found = exc.errors()[0]
    return f"{'.'.join(str(p) for p in found['loc'])}: {found['msg']}"


def _responses(command_id: int, params: dict[str, Any]) -> dict[str, Any] | JSONResponse:
    """``input.respond``'s answers, interrupt id -> response (one, or a ``responses`` list)."""
    entries = params.get("responses")
    if entries is None:
        entries = [params]
    if not isinstance(entries, list) or not entries:
        return _error(command_id, "invalid_argument", "input.respond requires a response.")
    found: dict[str, Any] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("interrupt_id"), str):
            return _error(command_id, "invalid_argument", "input.respond requires an interrupt_id.")
        namespace = entry.get("namespace", [])
        if not isinstance(namespace, list) or not all(isinstance(s, str) for s in namespace):
            return _error(
                command_id,
                "invalid_argument",
                "input.respond requires namespace to be a list of strings.",
            )
        found[entry["interrupt_id"]] = entry.get("response")
    return found


async def _input_respond(
    runner: Runner, thread_id: str, command_id: int, params: dict[str, Any]
) -> RunCreate | JSONResponse:
    answers = _responses(command_id, params)
    if isinstance(answers, JSONResponse):
        return answers
    try:
        run, meta = await find_thread(runner, thread_id)
    except HTTPException:
        run, meta = None, None
    if run is None or run.status is not RunStatus.WAITING:
        return _error(command_id, "no_such_run", "No interrupted run is bound to this thread.")
    pending = {w.interrupt_id for w in await runner.pending(thread_id)}
    for interrupt_id in answers:
        if interrupt_id not in pending:
            return _error(
                command_id,
                "no_such_interrupt",
                f"Unknown or already-consumed interrupt: {interrupt_id}",
            )
    assistant_id = (meta.metadata if meta else {}).get("assistant_id") or assistant_of(run)
    return RunCreate(
        assistant_id=str(assistant_id),
        command=CommandBody(resume=answers),
        stream_mode=MODES,
    )


@router.post(
    "/threads/{thread_id}/stream/events",
    summary="The thread's v3 protocol events in the channels asked for (server-sent events)",
)
async def stream_events(
    thread_id: str, request: Request, runner: RunnerDep, _actor: Reader
) -> StreamingResponse:
    body = await _json_body(request)
    body = body if isinstance(body, dict) else {}
    channels = body.get("channels")
    if not isinstance(channels, list) or not channels:
        raise HTTPException(400, "channels is required and must be a non-empty array")
    bad = [
        repr(c) if not isinstance(c, str) else c
        for c in channels
        if not (isinstance(c, str) and (c in CHANNELS or (c.startswith("custom:") and c[7:])))
    ]
    if bad:
        raise HTTPException(
            400,
            f"channels contains unsupported entries: {', '.join(bad[:5])}. Allowed: "
            "values, updates, messages, tools, custom, lifecycle, input, tasks, or any "
            "`custom:<name>`.",
        )
    namespaces = body.get("namespaces")
    if not (
        isinstance(namespaces, list)
        and all(isinstance(n, list) and all(isinstance(s, str) for s in n) for n in namespaces)
    ):
        namespaces = None
    depth = body.get("depth")
    depth = depth if isinstance(depth, int) and not isinstance(depth, bool) and depth >= 0 else None
    since = body.get("since")
    await find_thread(runner, thread_id)  # 404 for a thread that does not exist
    feed = Feeds.of(request).feed(thread_id)
    after = (
        since
        if isinstance(since, int) and not isinstance(since, bool) and since >= 0
        else feed.latest_start
    )
    asked = set(channels)

    async def events() -> AsyncIterator[bytes]:
        seen = after
        while True:
            await feed.wait(seen, HEARTBEAT)
            if feed.seq <= seen:
                yield b": heartbeat\n\n"
                continue
            for event in feed.events[seen:]:
                seen = event["seq"]
                if wanted(event, asked, namespaces, depth):
                    data = json.dumps(event, separators=(",", ":"))
                    yield f"event: {event['method']}\ndata: {data}\nid: {seen}\n\n".encode()

    return StreamingResponse(
        events(), media_type="text/event-stream", headers={"Cache-Control": "no-store"}
    )


@router.websocket("/threads/{thread_id}/stream/events")
async def stream_socket(websocket: WebSocket) -> None:
    """Refused: close code 4000 + 400, which the SDK reads as final (README, 'LangGraph')."""
    await websocket.accept()
    await websocket.close(
        code=4400,
        reason='stageline serves threads.stream over server-sent events only: use transport="sse"',
    )
