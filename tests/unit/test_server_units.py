"""Small parts of the server: the body limit, loopback addresses, errors as JSON."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

import httpx
import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from stageline.cli._serve import is_loopback
from stageline.errors import AlreadyDecided, InputError, RunNotFound, StorageError
from stageline.server._errors import install_error_handlers
from stageline.server._headers import SecurityHeaders
from stageline.server._limits import BodyLimit


class _Typed(BaseModel):
    n: Annotated[float, Field(allow_inf_nan=False)]
    k: int = Field(0, le=10)


def _app(limit: int) -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/echo")
    async def echo(request: Request) -> dict[str, int]:
        return {"size": len(await request.body())}

    @app.post("/typed")
    async def typed(body: _Typed) -> dict[str, float]:
        return {"n": body.n}

    @app.get("/fail/{what}")
    async def fail(what: str) -> None:
        raise {
            "decided": AlreadyDecided("gate 'g' was already approved by ann"),
            "input": InputError("unknown input 'x'"),
            "run": RunNotFound("r1"),
            "storage": StorageError("database unreachable"),
            "bug": ZeroDivisionError("secret internals"),
        }[what]

    app.add_middleware(BodyLimit, max_bytes=limit)
    return app


def _client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app, raise_app_exceptions=False), base_url="http://t"
    )


async def test_a_declared_body_over_the_limit_is_refused_before_it_is_read() -> None:
    async with _client(_app(10)) as client:
        assert (await client.post("/echo", content=b"x" * 10)).json() == {"size": 10}
        refused = await client.post("/echo", content=b"x" * 11)
    assert refused.status_code == 413 and "10 bytes" in refused.json()["detail"]


async def test_a_streamed_body_over_the_limit_is_refused() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(5):
            yield b"x" * 4

    async with _client(_app(10)) as client:
        refused = await client.post("/echo", content=chunks())
    assert refused.status_code == 413


@pytest.mark.parametrize(
    ("what", "status"),
    [("decided", 409), ("input", 422), ("run", 404), ("storage", 503), ("bug", 500)],
)
async def test_errors_are_json_with_their_status_and_no_traceback(what: str, status: int) -> None:
    async with _client(_app(100)) as client:
        answer = await client.get(f"/fail/{what}")
    assert answer.status_code == status
    assert "detail" in answer.json()
    assert "Traceback" not in answer.text and "secret internals" not in answer.text


async def test_an_unexpected_500_carries_the_safe_headers_itself() -> None:
    """Starlette answers an unexpected error outside the app's middleware (SecurityHeaders
    never sees it), so the handler's response brings the headers along."""
    app = _app(100)
    app.add_middleware(SecurityHeaders)
    async with _client(app) as client:
        answer = await client.get("/fail/bug")
    assert answer.status_code == 500
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]


@pytest.mark.parametrize(
    ("body", "echoed"),
    [
        (b'{"n": NaN}', "NaN"),
        (b'{"n": Infinity}', "Infinity"),
        (b'{"n": -1e400}', "-Infinity"),
        (b'{"n": 1, "k": 1e400}', "Infinity"),
    ],
)
async def test_a_422_echoing_a_non_finite_number_is_strict_json(body: bytes, echoed: str) -> None:
    """The handler alone (no ``StrictJson`` in front): the number it echoes becomes its name."""

    def refuse(name: str) -> None:
        raise AssertionError(name)

    async with _client(_app(100)) as client:
        answer = await client.post(
            "/typed", content=body, headers={"content-type": "application/json"}
        )
    assert answer.status_code == 422, answer.text
    [error] = json.loads(answer.text, parse_constant=refuse)["detail"]
    assert error["input"] == echoed


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.3", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.4", False),
        ("example.com", False),
        ("", False),
    ],
)
def test_loopback_addresses(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
