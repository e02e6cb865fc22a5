"""Safe headers on every response the server sends: pages, JSON, errors, event streams, files.

One ASGI middleware, outside every route and sub-app, so nothing answers without them: a
content type (``text/plain`` where a response named none, so a browser never guesses one), a
Content-Security-Policy (this server's own scripts and styles only, unless a page set a
stricter or narrower one of its own), ``X-Frame-Options: DENY``, ``X-Content-Type-Options:
nosniff`` and a Referrer-Policy.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from starlette.datastructures import MutableHeaders

__all__ = ["CSP", "SAFE_HEADERS", "SecurityHeaders", "csp_hash"]

CSP = (
    "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
"""The policy of a response that sets none: the dashboard's pages load their own files only."""

_ALWAYS = {"x-frame-options": "DENY", "x-content-type-options": "nosniff"}
_DEFAULTS = {"content-security-policy": CSP, "referrer-policy": "same-origin"}
_NO_BODY = (204, 304)
SAFE_HEADERS = {**_ALWAYS, **_DEFAULTS}
"""All of them, for a response made outside the middleware (an unexpected error's 500)."""


def csp_hash(text: str | bytes) -> str:
    """The CSP source (``'sha256-...'``) that allows one inline script or style element."""
    data = text.encode() if isinstance(text, str) else text
    return f"'sha256-{base64.b64encode(hashlib.sha256(data).digest()).decode()}'"


class SecurityHeaders:
    """ASGI middleware: adds the headers above to every HTTP response as it starts."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers.update(_ALWAYS)
                for name, value in _DEFAULTS.items():
                    headers.setdefault(name, value)
                if "content-type" not in headers and message.get("status") not in _NO_BODY:
                    headers["content-type"] = "text/plain; charset=utf-8"
            await send(message)

        await self.app(scope, receive, with_headers)
