"""API tokens in the SQL ledger (mixed into ``SqlLedger``); see ``_tokens``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, func, insert, select, update

from stageline.ledger._schema import tokens as tokens_table
from stageline.ledger._sessions import END_TOKEN_SESSIONS
from stageline.ledger._tokens import Scope, Token, _matches, _taken, check_token_name, hash_token

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["TokensSql"]


class TokensSql:
    """Tokens of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:
        _x: Executor

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    async def create_token(self, name: str, scope: Scope | str, token_hash: str) -> Token:
        """Record a token; a revoked token's name may be used again."""
        token = Token(
            name=check_token_name(name),
            scope=Scope(scope),
            token_hash=token_hash,
            created_at=time.time(),
        )
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT_BY_NAME), {"name": name})
            if rows and rows[0]["revoked_at"] is None:
                raise _taken(name)
            if rows:
                await x.execute(self._sql(_DELETE), {"name": name})
            await x.execute(self._sql(_INSERT), token.to_row())
        return token

    async def tokens(self) -> list[Token]:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_ALL), {})
        return [Token.from_row(r) for r in rows]

    async def revoke_token(self, name: str) -> bool:
        """Revoke the named token, ending its dashboard sessions; False when there is no active
        one by that name."""
        async with self._tx() as x:
            await x.execute(self._sql(END_TOKEN_SESSIONS), {"name": name})
            count = await x.execute(self._sql(_REVOKE), {"name": name, "now": time.time()})
        return bool(count)

    async def authenticate(self, secret: str) -> Token | None:
        """The active token whose secret this is, or None."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT_BY_HASH), {"token_hash": hash_token(secret)})
        return _matches(Token.from_row(rows[0]) if rows else None, secret)

    async def has_tokens(self) -> bool:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_COUNT_ACTIVE), {})
        return bool(rows and rows[0]["n"])


_t = tokens_table
_SELECT_ALL = select(_t).order_by(_t.c.created_at)
_SELECT_BY_NAME = select(_t).where(_t.c.name == bindparam("name"))
_SELECT_BY_HASH = select(_t).where(_t.c.token_hash == bindparam("token_hash"))
_COUNT_ACTIVE = select(func.count().label("n")).select_from(_t).where(_t.c.revoked_at.is_(None))
_INSERT = insert(_t)
_DELETE = delete(_t).where(_t.c.name == bindparam("name"))
_REVOKE = (
    update(_t)
    .where(_t.c.name == bindparam("name"), _t.c.revoked_at.is_(None))
    .values(revoked_at=bindparam("now"))
)
