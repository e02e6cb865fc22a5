"""GitHub's webhook signature: ``X-Hub-Signature-256: sha256=HEX``, the HMAC-SHA256 of the
raw body under the webhook secret."""

from __future__ import annotations

import hashlib
import hmac

__all__ = ["sign", "verify_signature"]


def sign(secret: str, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub sends for ``body``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def verify_signature(secret: str, body: bytes, header: str | None) -> bool:
    """Whether ``header`` is GitHub's signature of ``body`` under ``secret`` (constant time).
    A missing header, another scheme or an empty secret is False."""
    if not secret or not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().encode())
