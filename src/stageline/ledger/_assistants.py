"""LangGraph assistants in the ledger: configured variants of a template, with their versions.

An assistant names a template (``graph_id``) and what its runs start with (``config``,
``context``), with ``metadata``, a ``name`` and a ``description``. Creating one writes version
1; each update writes the next version and makes it the assistant's own; ``set_latest`` makes an
older version the assistant's own again. Versions are never changed once written; deleting an
assistant deletes them all. The built-in assistants (one per template, named as it) are not
kept here: the server makes them from the templates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from sqlalchemy import BindParameter, bindparam, delete, func, insert, select, update

from stageline.errors import InvalidTransition, UsageError
from stageline.ledger._schema import assistant_versions as _v
from stageline.ledger._schema import assistants as _a

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["Assistant", "AssistantNotFound", "AssistantsSql"]

_JSON_FIELDS = ("config", "context", "metadata")


class AssistantNotFound(UsageError):
    """No assistant (or no version of it) by that id."""

    http_status = 404


@dataclass(frozen=True, kw_only=True)
class Assistant:
    """An assistant at one of its versions (``updated_at``: when that version was written)."""

    assistant_id: str
    graph_id: str
    name: str
    version: int = 1
    description: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    context: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)

    def to_row(self) -> dict[str, Any]:
        row = {k: getattr(self, k) for k in self.__dataclass_fields__}
        for key in _JSON_FIELDS:
            row[key] = json.dumps(row[key], default=str)
        return row

    def version_row(self) -> dict[str, Any]:
        row = self.to_row()
        row["created_at"] = row.pop("updated_at")
        return row

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Assistant:
        data = {k: row[k] for k in cls.__dataclass_fields__ if k in row}
        for key in _JSON_FIELDS:
            data[key] = json.loads(data[key] or "{}")
        return cls(**data)


def _missing(assistant_id: str, version: int | None = None) -> AssistantNotFound:
    if version is None:
        return AssistantNotFound(f"assistant {assistant_id!r} not found")
    return AssistantNotFound(f"assistant {assistant_id!r} has no version {version}")


class AssistantsSql:
    """Assistants of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:

        def _tx(self) -> AbstractAsyncContextManager[Executor]: ...
        def _read(self) -> AbstractAsyncContextManager[Executor]: ...
        def _sql(self, stmt: Any) -> str: ...

    async def put_assistant(
        self, made: Assistant, *, if_exists: Literal["raise", "do_nothing"] = "raise"
    ) -> Assistant:
        """Record a new assistant at version 1; an id taken already is refused
        (``InvalidTransition``), or with ``do_nothing`` the assistant found is returned."""
        made = replace(made, version=1, updated_at=made.created_at)
        async with self._tx() as x:
            rows = await x.fetch(self._sql(_SELECT), {"assistant_id": made.assistant_id})
            if rows:
                if if_exists == "do_nothing":
                    return Assistant.from_row(rows[0])
                raise InvalidTransition(f"assistant {made.assistant_id!r} already exists")
            await x.execute(self._sql(_INSERT), made.to_row())
            await x.execute(self._sql(_INSERT_VERSION), made.version_row())
        return made

    async def assistant(self, assistant_id: str) -> Assistant | None:
        async with self._read() as x:
            rows = await x.fetch(self._sql(_SELECT), {"assistant_id": assistant_id})
        return Assistant.from_row(rows[0]) if rows else None

    async def assistants(self, graph_id: str | None = None) -> list[Assistant]:
        """Every assistant (of template ``graph_id``), oldest first."""
        stmt, params = (_ALL, {}) if graph_id is None else (_OF_GRAPH, {"graph_id": graph_id})
        async with self._read() as x:
            rows = await x.fetch(self._sql(stmt), params)
        return [Assistant.from_row(r) for r in rows]

    async def update_assistant(self, assistant_id: str, changes: Mapping[str, Any]) -> Assistant:
        """Write the assistant's next version (its own one with ``changes``: any of graph_id,
        name, description, config, context, metadata) and make it the assistant's own."""
        unknown = set(changes) - {"graph_id", "name", "description", *_JSON_FIELDS}
        if unknown:
            raise UsageError(f"an assistant has no field {', '.join(sorted(unknown))}")
        now = time.time()
        async with self._tx() as x:
            # Touching the row first holds it (Postgres), so two updates take turns.
            if not await x.execute(self._sql(_TOUCH), {"assistant_id": assistant_id, "now": now}):
                raise _missing(assistant_id)
            found = Assistant.from_row(
                (await x.fetch(self._sql(_SELECT), {"assistant_id": assistant_id}))[0]
            )
            top = await x.fetch(self._sql(_MAX_VERSION), {"assistant_id": assistant_id})
            made = replace(found, **changes, version=int(top[0]["v"]) + 1, updated_at=now)
            await x.execute(self._sql(_INSERT_VERSION), made.version_row())
            await x.execute(self._sql(_REPLACE), _replacing(made))
        return made

    async def assistant_versions(self, assistant_id: str) -> list[Assistant]:
        """Every version of the assistant, newest first (none: no such assistant)."""
        async with self._read() as x:
            head = await x.fetch(self._sql(_SELECT), {"assistant_id": assistant_id})
            rows = await x.fetch(self._sql(_VERSIONS), {"assistant_id": assistant_id})
        if not head:
            return []
        made = float(head[0]["created_at"])
        return [
            Assistant.from_row({**r, "updated_at": r["created_at"], "created_at": made})
            for r in rows
        ]

    async def set_latest_assistant(self, assistant_id: str, version: int) -> Assistant:
        """Make ``version`` the assistant's own again (what its runs start with)."""
        async with self._tx() as x:
            head = await x.fetch(self._sql(_SELECT), {"assistant_id": assistant_id})
            if not head:
                raise _missing(assistant_id)
            rows = await x.fetch(
                self._sql(_VERSION), {"assistant_id": assistant_id, "version": version}
            )
            if not rows:
                raise _missing(assistant_id, version)
            made = Assistant.from_row(
                {**rows[0], "created_at": head[0]["created_at"], "updated_at": time.time()}
            )
            await x.execute(self._sql(_REPLACE), _replacing(made))
        return made

    async def delete_assistant(self, assistant_id: str) -> bool:
        """Delete the assistant and its versions; False when there was none."""
        async with self._tx() as x:
            count = await x.execute(self._sql(_DELETE), {"assistant_id": assistant_id})
            await x.execute(self._sql(_DELETE_VERSIONS), {"assistant_id": assistant_id})
        return bool(count)


_ID: BindParameter[str] = bindparam("assistant_id")
_INSERT = insert(_a)
_INSERT_VERSION = insert(_v)
_SELECT = select(_a).where(_a.c.assistant_id == _ID)
_ALL = select(_a).order_by(_a.c.created_at, _a.c.assistant_id)
_OF_GRAPH = _ALL.where(_a.c.graph_id == bindparam("graph_id"))
_TOUCH = update(_a).where(_a.c.assistant_id == _ID).values(updated_at=bindparam("now"))
_KEPT = ("version", "graph_id", "name", "description", *_JSON_FIELDS, "updated_at")
_REPLACE = (
    update(_a).where(_a.c.assistant_id == _ID).values({c: bindparam(f"new_{c}") for c in _KEPT})
)


def _replacing(made: Assistant) -> dict[str, Any]:
    row = made.to_row()
    return {"assistant_id": made.assistant_id, **{f"new_{c}": row[c] for c in _KEPT}}


_MAX_VERSION = select(func.max(_v.c.version).label("v")).where(_v.c.assistant_id == _ID)
_VERSIONS = select(_v).where(_v.c.assistant_id == _ID).order_by(_v.c.version.desc())
_VERSION = select(_v).where(_v.c.assistant_id == _ID, _v.c.version == bindparam("version"))
_DELETE = delete(_a).where(_a.c.assistant_id == _ID)
_DELETE_VERSIONS = delete(_v).where(_v.c.assistant_id == _ID)
