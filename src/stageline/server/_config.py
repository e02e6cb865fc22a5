"""What ``stageline serve`` reads from the configuration, with its defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stageline.config import Settings

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "MAX_BODY_BYTES", "ServerConfig"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8484
MAX_BODY_BYTES = 1_000_000
"""Requests with a larger body are refused with 413 (``[server] max_body_bytes``)."""


def _get(section: Any, key: str) -> Any:
    if isinstance(section, Mapping):
        return section.get(key)
    return getattr(section, key, None)


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """The server's part of ``stageline.toml`` (``[server]`` and ``public_url``)."""

    max_body_bytes: int = MAX_BODY_BYTES
    public_url: str | None = None
    """Where people reach the server (links in chat messages); None: the address it binds."""

    @classmethod
    def of(cls, settings: Settings) -> ServerConfig:
        section = getattr(settings, "server", None)
        limit = _get(section, "max_body_bytes") if section is not None else None
        public = getattr(settings, "public_url", None) or (
            _get(section, "public_url") if section is not None else None
        )
        return cls(
            max_body_bytes=int(limit) if limit else MAX_BODY_BYTES,
            public_url=str(public) if public else None,
        )
