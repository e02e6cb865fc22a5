"""``stageline serve``'s access log keeps no secret: a decision link's token (its path) and a
token sent in a query string are written as ``[redacted]``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from server_fixtures import free_port, make_project

pytestmark = pytest.mark.timeout(300)

LINK = "eyJzZWNyZXQtbGluay1ib2R5.c2lnbmF0dXJlLXNlY3JldA"
QUERY = "sl_query-secret-0123456789"


def test_the_access_log_holds_no_link_token_and_no_query_token(tmp_path: Path) -> None:
    server = make_project(tmp_path / "project")
    port = free_port()
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stageline.cli", "serve", "--port", str(port)],
            cwd=server.project,
            env=server.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        server.port = port
        server.proc = proc
        server.log_path = log
        server.wait_ready()
        with httpx.Client(base_url=server.url, timeout=60) as client:
            sent = [
                client.get(f"/links/{LINK}"),
                client.post(f"/links/{LINK}", data={"note": "ok"}),
                client.get("/v1/runs", params={"token": QUERY, "limit": 5}),
                client.get("/ok", params={"access_token": QUERY}),
                client.get("/v1/runs", params={"API_KEY": QUERY, "sig": QUERY}),
                client.get("/ok", params={"kept": "visible-value"}),
            ]
        assert all(answer.status_code < 500 for answer in sent)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    written = log.read_text(errors="replace")
    assert written.count("/links/[redacted]") == 2, written
    assert "token=[redacted]&limit=5" in written and "access_token=[redacted]" in written
    assert "kept=visible-value" in written  # the access log is on, and only secrets go
    assert LINK not in written and LINK.split(".")[1] not in written
    assert QUERY not in written
