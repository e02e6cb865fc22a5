"""Dashboard sessions in the ledger (mixed into ``SqlLedger``): they outlive a restart of the
server, are shared by every server process over the same database, and end with their token.

A session is kept as the SHA-256 of its cookie's random id (the id is never stored, so a copy
of the database signs nobody in) and the hash of the token it signed in with. It is live while
that token is active, it was used within ``SessionPolicy.idle`` seconds and it began less than
``SessionPolicy.max_age`` seconds ago. One token holds at most ``SessionPolicy.per_token``
sessions: signing in again ends that token's oldest, never another token's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, insert, or_, select, update

from stageline.ledger._schema import sessions as _s
from stageline.ledger._schema import tokens as _t
from stageline.ledger._tokens import Token

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["SessionPolicy", "SessionsSql"]


@dataclass(frozen=True, kw_only=True)
class SessionPolicy:
    """How long sessions last and how many one token may hold."""

    idle: float = 2 * 3600.0
    """A session not used for this long ends."""
    max_age: float = 12 * 3600.0
    """A session ends this long after sign-in, however much it is used."""
    per_token: int = 20
    """Sessions one token may hold; signing in once more ends its oldest."""
    touch_every: float = 60.0
    """A session's last use is written at most this often (a write per page costs a commit)."""


class SessionsSql:
    """Sessions of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    async def start_session(
        self,
        session_hash: str,
        token_hash: str,
        policy: SessionPolicy,
        *,
        now: float | None = None,
    ) -> None:
        """Record a session of the token ``token_hash``; sessions that ended are deleted, and
        this token's oldest beyond ``policy.per_token``."""
        now = time.time() if now is None else now
        async with self._tx() as x:
            await x.execute(self._sql(_DELETE_ENDED), _ended(policy, now))
            await x.execute(
                self._sql(_INSERT),
                {
                    "session_hash": session_hash,
                    "token_hash": token_hash,
                    "created_at": now,
                    "last_seen_at": now,
                },
            )
            rows = await x.fetch(self._sql(_OF_TOKEN), {"token_hash": token_hash})
            others = [r for r in rows if r["session_hash"] != session_hash]  # newest first
            for row in others[max(policy.per_token - 1, 0) :]:
                await x.execute(self._sql(_DELETE), {"session_hash": row["session_hash"]})

    async def session_token(
        self, session_hash: str, policy: SessionPolicy, *, now: float | None = None
    ) -> Token | None:
        """The active token of a live session (its last use noted), or None: no such session,
        it ended (idle, too old, its token revoked), and then it is deleted."""
        now = time.time() if now is None else now
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SESSION), {"session_hash": session_hash})
        if not rows:
            return None
        row = rows[0]
        live = (
            row["revoked_at"] is None
            and row["name"] is not None
            and now - float(row["session_seen"]) <= policy.idle
            and now - float(row["session_made"]) <= policy.max_age
        )
        if not live:
            await self.end_session(session_hash)
            return None
        if now - float(row["session_seen"]) >= policy.touch_every:
            async with self._tx() as x:
                await x.execute(self._sql(_TOUCH), {"session_hash": session_hash, "now": now})
        return Token.from_row(row)

    async def end_session(self, session_hash: str) -> bool:
        """End a session (signing out); False when there was none."""
        async with self._tx() as x:
            count = await x.execute(self._sql(_DELETE), {"session_hash": session_hash})
        return bool(count)


def _ended(policy: SessionPolicy, now: float) -> dict[str, float]:
    return {"idle_since": now - policy.idle, "born_since": now - policy.max_age}


_INSERT = insert(_s)
_DELETE = delete(_s).where(_s.c.session_hash == bindparam("session_hash"))
_DELETE_ENDED = delete(_s).where(
    or_(_s.c.last_seen_at < bindparam("idle_since"), _s.c.created_at < bindparam("born_since"))
)
_OF_TOKEN = (
    select(_s.c.session_hash)
    .where(_s.c.token_hash == bindparam("token_hash"))
    .order_by(_s.c.created_at.desc(), _s.c.session_hash)
)
_SESSION = (
    select(_s.c.created_at.label("session_made"), _s.c.last_seen_at.label("session_seen"), *_t.c)
    .select_from(_s.outerjoin(_t, _t.c.token_hash == _s.c.token_hash))
    .where(_s.c.session_hash == bindparam("session_hash"))
)
_TOUCH = (
    update(_s)
    .where(_s.c.session_hash == bindparam("session_hash"))
    .values(last_seen_at=bindparam("now"))
)
END_TOKEN_SESSIONS = delete(_s).where(
    _s.c.token_hash.in_(
        select(_t.c.token_hash).where(_t.c.name == bindparam("name"), _t.c.revoked_at.is_(None))
    )
)
"""Ends every session of the active token named ``name`` (its revocation)."""
