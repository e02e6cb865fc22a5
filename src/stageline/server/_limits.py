"""What a request body may be, checked before any route reads it: at most the configured size
(413), and, when it says it is JSON, JSON as RFC 8259 has it: 422 for ``NaN``, ``Infinity``,
``-Infinity`` and numbers too large for a float (``1e400``), which Python's parser would take
as numbers that no field, column or answer can hold."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.exceptions import HTTPException

__all__ = ["BodyLimit", "StrictJson"]

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
                await _answer(send, 400, {"detail": "Content-Length is not a number"})
                return
            if size > self.max_bytes:
                await _answer(send, 413, {"detail": self._message()})
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
                await _answer(send, 413, {"detail": self._message()})

    def _message(self) -> str:
        return (
            f"request body too large: the limit is {self.max_bytes} bytes "
            "([server] max_body_bytes in stageline.toml)"
        )


class _NotJson(ValueError):
    """A number JSON does not have: ``NaN``, ``Infinity``, ``-Infinity``, or one so large
    (``1e400``) that it reads as an infinity."""


def _no_constant(name: str) -> Any:
    raise _NotJson(name)


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _NotJson(text if len(text) <= 40 else text[:37] + "...")
    return value


def _says_json(scope: Scope) -> bool:
    """Whether any ``Content-Type`` header names JSON (routes may read the first, or the last)."""
    for name, value in scope.get("headers") or []:
        media = value.split(b";", 1)[0].strip().lower()
        if name.lower() == b"content-type" and (
            media == b"application/json"
            or (media.startswith(b"application/") and media.endswith(b"+json"))
        ):
            return True
    return False


class StrictJson:
    """ASGI middleware: a JSON body holding ``NaN`` or an infinity gets 422, as FastAPI answers
    a body that is not JSON; the route sees every other body byte for byte (a signed one
    stays signed). Put it inside ``BodyLimit``: it reads (and parses) the whole body first."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not _says_json(scope):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message: Message = await receive()
            if message["type"] != "http.request":  # gone: the route finds out as it reads
                await self.app(scope, _replay(message, receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            json.loads(body, parse_constant=_no_constant, parse_float=_finite)
        except _NotJson as exc:
            await _answer(send, 422, _not_json(str(exc)))
            return
        except ValueError:  # not JSON at all: the route says so as it always does
            pass
        whole = {"type": "http.request", "body": body, "more_body": False}
        await self.app(scope, _replay(whole, receive), send)


def _not_json(number: str) -> dict[str, Any]:
    return {
        "detail": [
            {
                "type": "json_invalid",
                "loc": ["body"],
                "msg": f"{number} is not a number JSON can carry (RFC 8259): "
                "send a finite number, a string or null",
                "input": number,
            }
        ]
    }


def _replay(first: Message, receive: Any) -> Any:
    """A ``receive`` that gives ``first`` once, then what the client sends."""
    pending = [first]

    async def replayed() -> Message:
        if pending:
            return pending.pop()
        message: Message = await receive()
        return message

    return replayed


async def _answer(send: Any, status: int, content: dict[str, Any]) -> None:
    body = json.dumps(content).encode()
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
