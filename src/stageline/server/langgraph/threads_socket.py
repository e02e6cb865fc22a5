"""LangGraph's v3 thread streams over a WebSocket (``threads.stream(..., transport="websocket")``).

Each text frame the client sends is one protocol command: ``subscription.subscribe`` (its params
are a stream's filter, as ``POST .../stream/events`` takes it; answered with its
``subscription_id``) sends the thread's events it asks for as text frames, until
``subscription.unsubscribe`` or the socket closes; ``run.start`` and ``input.respond`` act as
over HTTP (``_v3_commands``). The handshake needs a token (``Authorization: Bearer`` or
``x-api-key``; ``decide`` for the commands that act): without one, or for a thread that does
not exist, the socket is closed with code 4000 + the HTTP status (4401, 4404), which the SDK
does not retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from typing import Any

from fastapi import APIRouter, HTTPException, WebSocket, WebSocketDisconnect

from stageline.ledger import Scope, Token
from stageline.runner import Runner
from stageline.server._advancer import Advancer
from stageline.server.langgraph._lookup import find_thread
from stageline.server.langgraph._v3 import Feeds, Filter, ThreadFeed
from stageline.server.langgraph._v3_commands import Refused, dispatch
from stageline.server.langgraph.threads_stream import HEARTBEAT

__all__ = ["router"]

router = APIRouter()


async def _token(websocket: WebSocket, runner: Runner) -> Token:
    said = websocket.headers.get("authorization", "")
    secret = said[7:].strip() if said[:7].lower() == "bearer " else ""
    secret = secret or websocket.headers.get("x-api-key", "")
    if not secret:
        raise HTTPException(
            401,
            "missing token: send Authorization: Bearer TOKEN or x-api-key: TOKEN with the "
            "handshake (threads.stream(..., headers=...))",
        )
    token = await runner.ledger.authenticate(secret) if len(secret) <= 200 else None
    if token is None:
        raise HTTPException(401, "invalid or revoked token")
    return token


@router.websocket("/threads/{thread_id}/stream/events")
async def stream_socket(websocket: WebSocket, thread_id: str) -> None:
    runner: Runner = websocket.app.state.runner
    advancer: Advancer = websocket.app.state.advancer
    await websocket.accept()
    try:
        token = await _token(websocket, runner)
        await find_thread(runner, thread_id)
    except HTTPException as refused:
        await websocket.close(code=4000 + refused.status_code, reason=str(refused.detail)[:120])
        return
    actor = token.name if token.scope.allows(Scope.DECIDE) else None
    session = _Session(websocket, Feeds.of(websocket).feed(thread_id))
    try:
        while True:
            payload = _parsed(await websocket.receive_text())
            method = payload.get("method") if isinstance(payload, dict) else None
            try:
                if method in ("subscription.subscribe", "subscription.unsubscribe"):
                    answer = session.command(payload)
                else:
                    answer = await dispatch(websocket, runner, advancer, thread_id, payload, actor)
            except Refused as refused:
                answer = refused.answer
            await session.send(answer)
    except WebSocketDisconnect:
        pass
    finally:
        await session.close()


def _parsed(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


class _Session:
    """One socket's subscriptions, each sending the thread's events it asks for."""

    def __init__(self, websocket: WebSocket, feed: ThreadFeed) -> None:
        self._websocket = websocket
        self._feed = feed
        self._sending = asyncio.Lock()
        self._subscriptions: dict[str, asyncio.Task[None]] = {}

    async def send(self, frame: dict[str, Any]) -> None:
        async with self._sending:
            await self._websocket.send_text(json.dumps(frame, separators=(",", ":")))

    def command(self, payload: dict[str, Any]) -> dict[str, Any]:
        command_id = payload.get("id")
        if not isinstance(command_id, int):
            raise Refused(None, "invalid_argument", "Protocol commands must include an integer id.")
        params = payload.get("params")
        if payload["method"] == "subscription.unsubscribe":
            key = params.get("subscription_id") if isinstance(params, dict) else None
            task = self._subscriptions.pop(key, None) if isinstance(key, str) else None
            if task is None:
                raise Refused(command_id, "no_such_subscription", f"Unknown subscription: {key}")
            task.cancel()
            return {"type": "success", "id": command_id, "result": {}}
        asked = Filter.of(params)
        if isinstance(asked, str):
            raise Refused(command_id, "invalid_argument", asked)
        key = str(uuid.uuid4())
        self._subscriptions[key] = asyncio.create_task(self._pump(asked), name=f"v3 socket {key}")
        return {
            "type": "success",
            "id": command_id,
            "result": {"subscription_id": key, "replayed_events": 0},
        }

    async def _pump(self, asked: Filter) -> None:
        with contextlib.suppress(WebSocketDisconnect, RuntimeError):
            async for event in asked.follow(self._feed, HEARTBEAT):
                if event is not None:
                    await self.send(event)

    async def close(self) -> None:
        tasks = list(self._subscriptions.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
