"""Secrets stay out of ``stageline serve``'s logs: decision-link tokens and tokens sent in a query.

uvicorn's access log writes each request's path with its query string. A decision link's path
(``/links/TOKEN``) is itself a credential, and a client may send a token as ``?token=``; both
are replaced by ``[redacted]`` before any handler sees the record.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

__all__ = ["LOGGERS", "RedactSecrets", "redact", "redact_logs"]

REDACTED = "[redacted]"
SECRET_PARAMS = (
    "token",
    "access_token",
    "refresh_token",
    "id_token",
    "api_key",
    "apikey",
    "x-api-key",
    "key",
    "sig",
    "signature",
    "secret",
    "password",
    "auth",
    "code",
)
"""Query parameters whose value is a secret, whatever their case."""

_LINK = re.compile(r"(/links/)[^?#\s\"']+", re.IGNORECASE)
_NAMES = "|".join(re.escape(p) for p in SECRET_PARAMS)
_PARAM = re.compile(rf"([?&;](?:{_NAMES})=)[^&;#\s\"']*", re.IGNORECASE)

LOGGERS = ("uvicorn.access", "uvicorn.error", "stageline.server")
"""The loggers that may write a request's path: uvicorn's and the server's own errors."""


def redact(text: str) -> str:
    """``text`` with link tokens and secret query values replaced by ``[redacted]``."""
    if "/links/" not in text.lower() and "=" not in text:
        return text
    return _PARAM.sub(rf"\g<1>{REDACTED}", _LINK.sub(rf"\g<1>{REDACTED}", text))


class RedactSecrets(logging.Filter):
    """A logging filter that redacts a record's message and its string arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            args = record.args.items()
            record.args = {k: redact(v) if isinstance(v, str) else v for k, v in args}
        return True


def redact_logs(names: Iterable[str] = LOGGERS) -> RedactSecrets:
    """Install one ``RedactSecrets`` on each named logger (once); returns it."""
    found = RedactSecrets()
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactSecrets) for f in logger.filters):
            logger.addFilter(found)
    return found
