"""What people paste into a run (a token in a clone URL, ``api_key=...``, an Authorization
header) never reaches a webhook: a real run, a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypedDict

import pytest

from stageline.config import Settings, with_overrides
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template

URL_TOKEN = "ghp_urlUserToken0123456789abcdef"
API_KEY = "plainApiKey-998877"
BASIC = "dXNlcjpzM2NyM3Q="
BEARER = "eyJhbGciOi.pasted.bearer"
PASSWORD = "hunter2-pasted"
SECRETS = (URL_TOKEN, API_KEY, BASIC, BEARER, PASSWORD)


class Pasted(TypedDict, total=False):
    note: str
    done: bool


async def careless(state: Pasted, ctx: StageContext) -> dict[str, Any]:
    ctx.log.info(
        f"cloned https://{URL_TOKEN}@git.example.com/org/repo.git",
        command=f"deploy --api_key={API_KEY}",
        header=f"Authorization: Basic {BASIC}",
    )
    ctx.log.warning(f"retrying with Bearer {BEARER}; password: {PASSWORD}")
    return {"done": True}


@pytest.fixture
def received() -> Iterator[tuple[str, list[bytes]]]:
    bodies: list[bytes] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host!s}:{port}/hook", bodies
    server.shutdown()
    server.server_close()


async def test_pasted_secrets_never_reach_a_webhook(
    sqlite_settings: Settings, received: tuple[str, list[bytes]]
) -> None:
    url, bodies = received
    settings = with_overrides(
        sqlite_settings,
        sinks=(
            {"type": "webhook", "format": "json", "url": url, "min_level": "debug", "linger": 0.05},
            {
                "type": "webhook",
                "format": "slack",
                "url": url,
                "min_level": "debug",
                "linger": 0.05,
            },
        ),
    )
    template = Template("pasted", state=Pasted).add_stage("careless", careless)
    async with Runner.open(settings) as runner:
        summary = await runner.start(template, {"note": "hello"})
        assert summary.status is RunStatus.SUCCEEDED
        logged = [
            e for e in await runner.ledger.events(summary.run.run_id) if e.kind == "stage.log"
        ]
    assert any(URL_TOKEN in e.message for e in logged)  # the ledger keeps what was said
    assert bodies, "the webhook received nothing"
    payload = b"\n".join(bodies).decode()
    for secret in SECRETS:
        assert secret not in payload, secret
    events = [e for body in bodies if b'"events"' in body for e in json.loads(body)["events"]]
    said = [e for e in events if e["kind"] == "stage.log"]
    assert "https://***@git.example.com/org/repo.git" in said[0]["message"]
    assert said[0]["data"]["command"] == "deploy --api_key=***"
