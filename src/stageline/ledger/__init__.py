"""The run ledger: runs, node records and events, with the checkpoints of their runs."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import TYPE_CHECKING, Any

from stageline.errors import ConfigError
from stageline.ledger._base import LedgerStore, Publisher, holder_is_dead, this_holder
from stageline.ledger._human import (
    Effect,
    EffectStatus,
    Wait,
    WaitKind,
    WaitStatus,
    already_decided,
)
from stageline.ledger._reader import open_ledger
from stageline.ledger.records import Event, EventCategory, NodeRecord, NodeStatus, Run, RunStatus

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from stageline.ledger._admin import (
        CopyReport,
        Reclaimed,
        UpgradeReport,
        copy_database,
        reclaim_space,
        upgrade_database,
    )
    from stageline.ledger._lineage import Lineage
    from stageline.ledger._memory import MemoryLedger
    from stageline.ledger._outbox import Claim, SinkStart
    from stageline.ledger._outcome_stats import OutcomeGroup, group_outcomes
    from stageline.ledger._outcomes import Outcome
    from stageline.ledger._search import RunPage, RunQuery
    from stageline.ledger._threads import ApiRun, ApiRunStatus, ThreadMeta
    from stageline.ledger._tokens import Scope, Token, hash_token, new_token

# Imported on first use: these pull in LangGraph (or SQLAlchemy), which the command line's read
# commands never need.
_LAZY = {
    "CopyReport": "stageline.ledger._admin",
    "Reclaimed": "stageline.ledger._admin",
    "reclaim_space": "stageline.ledger._admin",
    "UpgradeReport": "stageline.ledger._admin",
    "copy_database": "stageline.ledger._admin",
    "upgrade_database": "stageline.ledger._admin",
    "MemoryLedger": "stageline.ledger._memory",
    "Outcome": "stageline.ledger._outcomes",
    "Lineage": "stageline.ledger._lineage",
    "RunPage": "stageline.ledger._search",
    "ApiRun": "stageline.ledger._threads",
    "ApiRunStatus": "stageline.ledger._threads",
    "ThreadMeta": "stageline.ledger._threads",
    "RunQuery": "stageline.ledger._search",
    "Scope": "stageline.ledger._tokens",
    "Token": "stageline.ledger._tokens",
    "hash_token": "stageline.ledger._tokens",
    "new_token": "stageline.ledger._tokens",
    "Claim": "stageline.ledger._outbox",
    "SinkStart": "stageline.ledger._outbox",
    "OutcomeGroup": "stageline.ledger._outcome_stats",
    "group_outcomes": "stageline.ledger._outcome_stats",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stageline.ledger' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ApiRun",
    "ApiRunStatus",
    "Backend",
    "Claim",
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
    "OutcomeGroup",
    "Publisher",
    "Reclaimed",
    "Run",
    "RunPage",
    "RunQuery",
    "RunStatus",
    "Scope",
    "SinkStart",
    "ThreadMeta",
    "Token",
    "UpgradeReport",
    "Wait",
    "WaitKind",
    "WaitStatus",
    "already_decided",
    "copy_database",
    "group_outcomes",
    "hash_token",
    "holder_is_dead",
    "mask_url",
    "new_token",
    "open_backend",
    "open_ledger",
    "reclaim_space",
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


async def open_backend(url: str, serde: SerializerProtocol, *, legacy: bool = False) -> Backend:
    """The backend named by ``url``: ``sqlite:///PATH``, ``postgresql://...`` or ``memory://``.

    A database that cannot be reached or set up raises ``StorageError``; nothing falls back to
    memory, which would throw durability away without a word. A database that still holds
    LangGraph's checkpoint tables (made by the release before stageline's own store) is refused
    until ``stageline db upgrade`` converts it (``legacy=True``: the upgrade's own open).
    """
    if url.startswith("postgres"):
        from stageline.ledger._postgres import open_postgres

        pg_ledger, pg_saver, close = await open_postgres(url, serde, masked=mask_url(url))
        assert pg_saver is not None  # a serde was given
        backend = Backend(ledger=pg_ledger, saver=pg_saver, _closer=close)
    elif url.startswith("sqlite"):
        from stageline.ledger._sqlite import open_sqlite

        ledger, saver, close = await open_sqlite(url, serde)
        backend = Backend(ledger=ledger, saver=saver, _closer=close)
    elif url.startswith("memory"):
        from stageline.ledger._memory import open_memory

        mem, mem_saver = open_memory(serde)
        return Backend(ledger=mem, saver=mem_saver)
    else:
        raise ConfigError(
            f"unsupported database URL {mask_url(url)!r}; "
            "use sqlite:///PATH, postgresql://USER:PASSWORD@HOST:PORT/DB or memory://"
        )
    if not legacy:
        from stageline.ledger._reader import refuse_legacy

        try:
            await refuse_legacy(backend.ledger, url)
        except BaseException:
            await backend.aclose()
            raise
    return backend
