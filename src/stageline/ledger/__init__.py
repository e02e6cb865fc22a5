"""The run ledger: runs, node records and events, beside LangGraph's checkpoints."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.serde.base import SerializerProtocol

from stageline.errors import ConfigError
from stageline.ledger._admin import CopyReport, UpgradeReport, copy_database, upgrade_database
from stageline.ledger._base import LedgerStore, Publisher, holder_is_dead, this_holder
from stageline.ledger._human import (
    Effect,
    EffectStatus,
    Wait,
    WaitKind,
    WaitStatus,
    already_decided,
)
from stageline.ledger._lineage import Lineage
from stageline.ledger._memory import MemoryLedger
from stageline.ledger._outcomes import Outcome
from stageline.ledger._threads import ApiRun, ApiRunStatus, ThreadMeta
from stageline.ledger._tokens import Scope, Token, hash_token, new_token
from stageline.ledger.records import Event, EventCategory, NodeRecord, NodeStatus, Run, RunStatus

__all__ = [
    "ApiRun",
    "ApiRunStatus",
    "Backend",
    "CopyReport",
    "Effect",
    "EffectStatus",
    "Event",
    "EventCategory",
    "LedgerStore",
    "Lineage",
    "MemoryLedger",
    "NodeRecord",
    "NodeStatus",
    "Outcome",
    "Publisher",
    "Run",
    "RunStatus",
    "Scope",
    "ThreadMeta",
    "Token",
    "UpgradeReport",
    "Wait",
    "WaitKind",
    "WaitStatus",
    "already_decided",
    "copy_database",
    "hash_token",
    "holder_is_dead",
    "mask_url",
    "new_token",
    "open_backend",
    "this_holder",
    "upgrade_database",
]


@dataclass(kw_only=True)
class Backend:
    """A ledger and the checkpoint saver that shares its database."""

    ledger: LedgerStore
    saver: BaseCheckpointSaver[Any]
    _closer: Any = None

    async def aclose(self) -> None:
        await self.ledger.flush()
        if self._closer is not None:
            await self._closer()


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    creds, _, host = rest.rpartition("@")
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


async def open_backend(url: str, serde: SerializerProtocol) -> Backend:
    """The backend named by ``url``: ``sqlite:///PATH``, ``postgresql://...`` or ``memory://``.

    A database that cannot be reached or set up raises ``StorageError``; nothing falls back to
    memory, which would throw durability away without a word.
    """
    if url.startswith("postgres"):
        from stageline.ledger._postgres import open_postgres

        pg_ledger, pg_saver, close = await open_postgres(url, serde, masked=mask_url(url))
        return Backend(ledger=pg_ledger, saver=pg_saver, _closer=close)
    if url.startswith("sqlite"):
        from stageline.ledger._sqlite import open_sqlite

        ledger, saver = await open_sqlite(url, serde)
        return Backend(ledger=ledger, saver=saver, _closer=saver.conn.close)
    if url.startswith("memory"):
        from stageline.ledger._memory import open_memory

        mem, mem_saver = open_memory(serde)
        return Backend(ledger=mem, saver=mem_saver)
    raise ConfigError(
        f"unsupported database URL {mask_url(url)!r}; "
        "use sqlite:///PATH, postgresql://USER:PASSWORD@HOST:PORT/DB or memory://"
    )
