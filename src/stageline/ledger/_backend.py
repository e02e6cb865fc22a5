"""A backend by URL: the ledger and the checkpoint saver that shares its database.

``sqlite:///PATH`` (a file), ``postgresql://...``, or ``memory://``: SQLite in memory, the same
ledger and saver code over a database that lives as long as the ledger that opened it (tests,
``--ephemeral``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from stageline.errors import ConfigError, StorageError
from stageline.ledger._base import LedgerStore

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.serde.base import SerializerProtocol

__all__ = ["Backend", "is_memory_url", "mask_url", "open_backend", "refuse_legacy"]


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


def is_memory_url(url: str) -> bool:
    """Whether ``url`` names a database in memory (``memory://``, or SQLAlchemy's spelling
    ``sqlite:///:memory:``): each open of it is a new, empty database."""
    return url.startswith("memory:") or url.partition("?")[0] == "sqlite:///:memory:"


def unsupported_url(url: str) -> ConfigError:
    return ConfigError(
        f"unsupported database URL {mask_url(url)!r}; "
        "use sqlite:///PATH, postgresql://USER:PASSWORD@HOST:PORT/DB or memory://"
    )


async def open_backend(url: str, serde: SerializerProtocol, *, legacy: bool = False) -> Backend:
    """The backend named by ``url``: ``sqlite:///PATH``, ``postgresql://...`` or ``memory://``.

    A database that cannot be reached or set up raises ``StorageError``; nothing falls back to
    memory, which would throw durability away without a word. A database that still holds
    LangGraph's checkpoint tables (made by the release before stageline's own store) is refused
    until ``stageline db upgrade`` converts it (``legacy=True``: the upgrade's own open).
    """
    if is_memory_url(url):
        from stageline.ledger._sqlite import open_memory

        memory, memory_saver, forget = await open_memory(serde, url)
        return Backend(ledger=memory, saver=memory_saver, _closer=forget)
    if url.startswith("postgres"):
        from stageline.ledger._postgres import open_postgres

        pg_ledger, pg_saver, close = await open_postgres(url, serde, masked=mask_url(url))
        assert pg_saver is not None  # a serde was given
        backend = Backend(ledger=pg_ledger, saver=pg_saver, _closer=close)
    elif url.startswith("sqlite"):
        from stageline.ledger._sqlite import open_sqlite

        ledger, saver, close = await open_sqlite(url, serde)
        backend = Backend(ledger=ledger, saver=saver, _closer=close)
    else:
        raise unsupported_url(url)
    if not legacy:
        try:
            await refuse_legacy(backend.ledger, url)
        except BaseException:
            await backend.aclose()
            raise
    return backend


async def refuse_legacy(ledger: LedgerStore, url: str) -> None:
    """``StorageError`` if the database still holds LangGraph's checkpoint tables."""
    from stageline.ledger._sql import SqlLedger

    if isinstance(ledger, SqlLedger) and await ledger.legacy_checkpoints():
        raise StorageError(
            f"the database {mask_url(url)} was made by an older stageline (its checkpoints are "
            "in LangGraph's tables): run `stageline db upgrade` once to convert it"
        )
