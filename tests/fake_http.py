"""The loopback HTTP server under the tests' fake APIs (``fake_slack``, ``fake_telegram``): each
POST's body is read and parsed (JSON, or a form's fields), handed to the fake's
``answer(path, body) -> (status, JSON answer)``, and the answer sent back as JSON; a threaded
server on 127.0.0.1 with a port of its own, so a slow answer holds up no other request.

``wait_for`` is how a test waits for what a fake (or a server) was sent: it polls, with a
generous timeout and no wall-clock assertion.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar
from urllib.parse import parse_qs

Answer = Callable[[str, dict[str, Any]], tuple[int, dict[str, Any]]]
"""``answer(path, body)``: the HTTP status and the JSON answer to a POST to ``path``."""
Hold = Callable[[str, dict[str, Any]], float]
"""``hold(path, body)``: seconds to wait, once answered, before sending the answer."""
T = TypeVar("T")


def wait_for(
    check: Callable[[], T],
    *,
    timeout: float = 60.0,
    every: float = 0.1,
    failure: Callable[[], str] = lambda: "",
) -> T:
    """``check()``'s first truthy value, polled every ``every`` s; after ``timeout`` s an
    ``AssertionError`` saying what was waited for (``failure()``: the state that explains it)."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() >= deadline:
            raise AssertionError(f"nothing within {timeout}s: {failure() or check}")
        time.sleep(every)


def read_body(raw: bytes) -> dict[str, Any]:
    """A request body as a dict: JSON, else a form (a field's first value); empty: ``{}``."""
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        return {k: v[0] for k, v in parse_qs(raw.decode()).items()}
    return body if isinstance(body, dict) else {}


class LoopbackJSON:
    """A JSON API on 127.0.0.1 that ``answer`` answers (``hold`` may delay an answer)."""

    def __init__(self, answer: Answer, *, hold: Hold | None = None) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = read_body(raw)
                status, said = answer(self.path, body)
                wait = hold(self.path, body) if hold is not None else 0.0
                if wait > 0:
                    time.sleep(wait)
                data = json.dumps(said).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
