"""Refuse request bodies over the configured size with 413, before any route reads them."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException

__all__ = ["BodyLimit"]

Scope = dict[str, Any]
Message = dict[str, Any]


class _TooLarge(HTTPException):
    """Raised while a route reads a body that grows past the limit: FastAPI passes an
    ``HTTPException`` through as it is (any other error reading a body becomes a 400)."""


class BodyLimit:
    """ASGI middleware: a body over ``max_bytes`` (declared or streamed) gets 413."""

    def __init__(self, app: Any, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                await self._refuse(send, 400, "Content-Length is not a number")
                return
            if size > self.max_bytes:
                await self._refuse(send, 413, self._message())
                return
        seen = 0
        started = False

        async def counted() -> Message:
            nonlocal seen
            message: Message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge(413, self._message())
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except _TooLarge:
            if not started:
                await self._refuse(send, 413, self._message())

    def _message(self) -> str:
        return (
            f"request body too large: the limit is {self.max_bytes} bytes "
            "([server] max_body_bytes in stageline.toml)"
        )

    @staticmethod
    async def _refuse(send: Any, status: int, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
