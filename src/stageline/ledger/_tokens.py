"""API tokens: who may call ``stageline serve``, and with which scope (the SQL ledger's part is
in ``_tokens_sql``, so the command line can name a scope without importing SQLAlchemy).

Only a hash of each token is kept (SHA-256 of a 256-bit random secret: no salt or slow hash is
needed for a secret that cannot be guessed), so a copy of the database lets nobody in. A token
is looked up by its hash and the stored hash is compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stageline.errors import ConflictError, InputError

__all__ = [
    "TOKEN_NAME_PATTERN",
    "Scope",
    "Token",
    "check_token_name",
    "hash_token",
    "new_token",
]

TOKEN_PREFIX = "sl_"
TOKEN_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}"


class Scope(StrEnum):
    READ = "read"  # look at runs, events, templates, stats
    DECIDE = "decide"  # read, and start runs, decide gates, answer questions, retry and resume
    ADMIN = "admin"  # everything: cancel, prune, fork, settle effects

    def allows(self, needed: Scope | str) -> bool:
        """Whether a token of this scope may do what ``needed`` allows."""
        order = list(Scope)
        return order.index(self) >= order.index(Scope(needed))


@dataclass(frozen=True, kw_only=True)
class Token:
    """A named API token; ``token_hash`` is all that is kept of its secret."""

    name: str
    scope: Scope
    token_hash: str
    created_at: float
    revoked_at: float | None = None
    last_used_at: float | None = None
    """Not kept up to date yet (a write per request would cost a commit)."""

    @property
    def active(self) -> bool:
        return self.revoked_at is None

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        row["scope"] = str(self.scope)
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Token:
        data = {k: row[k] for k in cls.__dataclass_fields__}
        data["scope"] = Scope(data["scope"])
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """What ``token list`` shows: never the hash."""
        return {
            "name": self.name,
            "scope": str(self.scope),
            "created_at": self.created_at,
            "revoked_at": self.revoked_at,
            "active": self.active,
        }


def new_token() -> str:
    """A fresh secret: ``sl_`` and 43 URL-safe characters (256 random bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def check_token_name(name: str) -> str:
    import re

    if not re.fullmatch(TOKEN_NAME_PATTERN, name or ""):
        raise InputError(
            f"token name {name!r} is not valid: use 1-64 letters, digits, '.', '_', '@' or '-', "
            "starting with a letter or digit"
        )
    return name


def _matches(token: Token | None, secret: str) -> Token | None:
    if token is None or not token.active:
        return None
    return token if hmac.compare_digest(token.token_hash, hash_token(secret)) else None


def _taken(name: str) -> ConflictError:
    return ConflictError(
        f"a token named {name!r} exists already; revoke it first "
        f"(`stageline token revoke {name}`) or pick another name"
    )
