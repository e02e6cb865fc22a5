"""What two-way chat keeps in the ledger: the messages posted for each run, keys used once, and
the server's own secrets.

A chat message is a view over a gate or question set that lives in the ledger; what is kept
here only says where that view is (channel and ``ts``), so it can be threaded and updated, and
a reply in a thread can be traced back to its run.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, select

from stageline.ledger._schema import chat_messages, chat_once, chat_secrets

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["ChatMessage", "ChatSql"]


@dataclass(frozen=True, kw_only=True)
class ChatMessage:
    """A message posted for a run: ``key`` says what it shows (``root`` is the run's thread)."""

    run_id: str
    key: str
    channel: str
    ts: str
    created_at: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ChatMessage:
        return cls(
            run_id=row["run_id"],
            key=row["key"],
            channel=row["channel"],
            ts=str(row["ts"]),
            created_at=float(row["created_at"]),
        )


class ChatSql:
    """Chat records of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:
        _upsert: Any

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    def _chat_insert(self, table: Any) -> Any:
        name = f"_chat_insert_{table.name}"
        stmt = self.__dict__.get(name)
        if stmt is None:
            stmt = self._upsert(table).on_conflict_do_nothing()
            self.__dict__[name] = stmt
        return stmt

    async def chat_message(self, run_id: str, key: str) -> ChatMessage | None:
        """The message posted for ``run_id`` showing ``key``, if one was."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_MESSAGE), {"run_id": run_id, "key": key})
        return ChatMessage.from_row(rows[0]) if rows else None

    async def save_chat_message(self, run_id: str, key: str, channel: str, ts: str) -> None:
        """Remember a message posted (the first one for a key stays)."""
        async with self._tx() as x:
            await x.execute(
                self._sql(self._chat_insert(chat_messages)),
                {
                    "run_id": run_id,
                    "key": key,
                    "channel": channel,
                    "ts": ts,
                    "created_at": time.time(),
                },
            )

    async def chat_thread_run(self, channel: str, thread_ts: str) -> str | None:
        """The run whose thread starts at message ``thread_ts`` in ``channel``."""
        async with self._read() as x:
            rows = await x.fetch(
                self._sql(_THREAD), {"channel": channel, "ts": thread_ts, "key": "root"}
            )
        return str(rows[0]["run_id"]) if rows else None

    async def chat_once(self, key: str) -> bool:
        """Use ``key`` once: True the first time, False ever after (the database decides)."""
        async with self._tx() as x:
            count = await x.execute(
                self._sql(self._chat_insert(chat_once)), {"key": key, "created_at": time.time()}
            )
        return bool(count)

    async def chat_seen(self, key: str) -> bool:
        """Whether ``key`` was used (``chat_once``), without using it."""
        async with self._read() as x:
            rows = await x.fetch(self._sql(_ONCE), {"key": key})
        return bool(rows)

    async def chat_secret(self, name: str) -> str:
        """The server secret ``name``, made (256 random bits) the first time it is asked for."""
        async with self._tx() as x:
            await x.execute(
                self._sql(self._chat_insert(chat_secrets)),
                {"name": name, "value": secrets.token_urlsafe(32), "created_at": time.time()},
            )
            rows = await x.fetch(self._sql(_SECRET), {"name": name})
        return str(rows[0]["value"])


_m = chat_messages
_MESSAGE = select(_m).where(_m.c.run_id == bindparam("run_id"), _m.c.key == bindparam("key"))
_THREAD = select(_m.c.run_id).where(
    _m.c.channel == bindparam("channel"), _m.c.ts == bindparam("ts"), _m.c.key == bindparam("key")
)
_ONCE = select(chat_once.c.key).where(chat_once.c.key == bindparam("key"))
_SECRET = select(chat_secrets.c.value).where(chat_secrets.c.name == bindparam("name"))
