"""Secrets out of events: what sinks see has secret-looking values masked.

The bus redacts each event once, before any sink sees it: the values of keys that name a
secret (``api_key``, ``token``, ``password``, ``authorization``...) at any depth of its data,
and, in every string, credentials in URLs (a password, or a token as the user name), secret
query parameters, ``name=value`` / ``name: value`` pairs that name a secret, ``Authorization``
headers and bearer tokens pasted as text, Telegram bot URLs, well-known token shapes and the
secrets a sink was configured with.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from stageline.ledger.records import Event

__all__ = ["MASK", "Redactor", "is_secret_key", "mask_url"]

MASK = "***"

_SECRET_WORDS = frozenset(
    {
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "authorization",
        "auth",
        "credential",
        "credentials",
        "cookie",
        "cookies",
        "bearer",
        "jwt",
        "otp",
    }
)
_SECRET_RUNS = (
    "apikey",
    "accesskey",
    "privatekey",
    "secretkey",
    "clientsecret",
    "sessionid",
    "webhookurl",
    "signingkey",
)
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


@functools.lru_cache(maxsize=4096)
def is_secret_key(key: str) -> bool:
    """True when a mapping key names a secret; ``input_tokens`` and ``author`` do not."""
    words = [w.lower() for w in _WORD.findall(key)]
    if any(w in _SECRET_WORDS for w in words):
        return True
    joined = "".join(words)
    return any(run in joined for run in _SECRET_RUNS)


_QUERY_NAMES = (
    r"token|access_token|refresh_token|id_token|api[_-]?key|key|secret|sig|signature"
    r"|password|passwd|auth|code|client_secret"
)

_FREE_NAMES = (
    r"api[_-]?key|x[_-]api[_-]key|access[_-]?key|access[_-]?token|refresh[_-]?token"
    r"|auth[_-]?token|client[_-]?secret|private[_-]?key|secret[_-]?key|token|secret"
    r"|password|passwd|pwd|passphrase"
)

_PATTERNS: tuple[tuple[str, re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # user:password@ in any URL
    ("@", re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*):[^/\s@]+@"), rf"\1:{MASK}@"),
    # a token as the URL's user name, without a password: https://TOKEN@host/
    ("@", re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)(?!\*\*\*[:@])[^/\s:@?#]+@"), rf"\1{MASK}@"),
    # Authorization: Basic ..., Authorization: token ... (a header pasted as text)
    (
        "",
        re.compile(
            r"(?i)\b(authorization[\"']?\s*[:=]\s*[\"']?(?:basic|bearer|token|digest"
            r"|negotiate)?\s*)[^\s\"',;]+"
        ),
        rf"\1{MASK}",
    ),
    # api_key=..., "token": "...", password: ... in free text (input_tokens=5 is not a secret)
    (
        "",
        re.compile(
            rf"(?i)(?<![a-z0-9])((?:{_FREE_NAMES})[\"']?\s*[:=]\s*[\"']?)"
            r"(?!\*\*\*)[^\s\"'&,;}\]]+"
        ),
        rf"\1{MASK}",
    ),
    # ?token=... &api_key=...
    ("=", re.compile(rf"(?i)([?&;](?:{_QUERY_NAMES})=)[^&;#\s\"']+"), rf"\1{MASK}"),
    # webhook URLs whose path is the credential
    ("/api/webhooks/", re.compile(r"(?i)(/api/webhooks/\d+/)[\w\-]+"), rf"\1{MASK}"),
    (
        "hooks.slack.com",
        re.compile(
            r"(?i)(hooks\.slack\.com/(?:services|workflows|triggers)/)"
            r"[\w/\-]+"
        ),
        rf"\1{MASK}",
    ),
    # Telegram's Bot API URLs: https://api.telegram.org/bot<id>:<secret>/sendMessage
    ("/bot", re.compile(r"(/bot)\d+:[\w\-]+"), rf"\1{MASK}"),
    ("", re.compile(r"(?i)\b(bearer\s+)(?!\*\*\*)[\w.~+/=\-]+"), rf"\1{MASK}"),
    (
        "",
        re.compile(
            r"\b(?:sk-[\w\-]{16,}|gh[pousr]_\w{20,}|github_pat_\w{20,}"
            r"|xox[abprs]-[\w\-]{10,}|AKIA[0-9A-Z]{16}|\d{6,12}:AA[\w\-]{30,})"
        ),
        MASK,
    ),
)


class Redactor:
    """Masks secrets in events; also the exact secret values it is told about."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self._known: list[str] = []
        self.add(*known)

    def add(self, *secrets: str | None) -> None:
        """Mask these exact values wherever they appear (values under 4 characters are not
        masked: they would mangle ordinary text)."""
        fresh = {s for s in secrets if s and len(s) >= 4} - set(self._known)
        self._known = sorted({*self._known, *fresh}, key=len, reverse=True)

    def text(self, text: str) -> str:
        """``text`` with secrets masked; the same object when nothing changed."""
        original = text
        for secret in self._known:
            if secret in text:
                text = text.replace(secret, MASK)
        for needle, pattern, repl in _PATTERNS:
            if needle in text:
                text = pattern.sub(repl, text)
        return original if text == original else text

    def value(self, value: Any) -> Any:
        """``value`` with secrets masked; the same object when nothing changed."""
        if isinstance(value, str):
            return self.text(value) if value else value
        if isinstance(value, Mapping):
            changed = False
            out: dict[Any, Any] = {}
            for key, item in value.items():
                new = (
                    MASK
                    if isinstance(key, str) and is_secret_key(key) and item not in (None, "", MASK)
                    else self.value(item)
                )
                changed = changed or new is not item
                out[key] = new
            return out if changed else value
        if isinstance(value, list | tuple):
            items = [self.value(v) for v in value]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value
            return type(value)(items) if isinstance(value, tuple) else items
        return value

    def event(self, event: Event) -> Event:
        """The event with secrets masked in its message and data; itself when it has none."""
        message = self.text(event.message) if event.message else event.message
        data = self.value(event.data) if event.data else event.data
        if message is event.message and data is event.data:
            return event
        return dataclasses.replace(event, message=message, data=data)


def mask_url(url: str) -> str:
    """A URL fit for a log line: scheme and host only (webhook paths and queries carry tokens)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return MASK
    host = rest.split("/", 1)[0].split("?", 1)[0].rpartition("@")[2]
    return f"{scheme}://{host}"
