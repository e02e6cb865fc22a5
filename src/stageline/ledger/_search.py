"""Finding runs: by several statuses, template, a time window, text in their inputs; in pages.

Pages are newest first and keyed by ``(created_at, run_id)``: a cursor names the last run of a
page, so runs created meanwhile never shift a page (as an offset would).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, func, or_, select

from stageline.errors import InputError
from stageline.ledger._schema import runs as runs_table
from stageline.ledger.records import Run

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from stageline.ledger._executor import Executor

__all__ = ["RunPage", "RunQuery", "RunSearchSql"]


@dataclass(frozen=True, kw_only=True)
class RunQuery:
    """What to look for; every field left empty matches every run."""

    statuses: Sequence[str] = ()
    template: str | None = None
    since: float | None = None
    """Created at or after (epoch seconds)."""
    until: float | None = None
    """Created before (epoch seconds)."""
    text: str | None = None
    """A piece of text found in the run's inputs (case-insensitive)."""
    limit: int = 50
    offset: int = 0
    cursor: str | None = None
    """From ``RunPage.next_cursor``: the page after that one (``offset`` is then ignored)."""


@dataclass(frozen=True, kw_only=True)
class RunPage:
    runs: list[Run]
    next_cursor: str | None
    """None on the last page."""


def _encode(run: Run) -> str:
    raw = json.dumps([run.created_at, run.run_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str) -> tuple[float, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, run_id = json.loads(raw)
        return float(created), str(run_id)
    except (ValueError, TypeError) as exc:
        raise InputError(f"cursor {cursor[:40]!r} is not one this server gave out") from exc


def _page(found: list[Run], limit: int) -> RunPage:
    more = len(found) > limit
    runs = found[:limit]
    return RunPage(runs=runs, next_cursor=_encode(runs[-1]) if more and runs else None)


def _check(query: RunQuery) -> None:
    if not 1 <= query.limit <= 1000:
        raise InputError(f"limit must be 1 to 1000, not {query.limit}")
    if query.offset < 0:
        raise InputError(f"offset must be 0 or more, not {query.offset}")


class RunSearchSql:
    """``search_runs`` of the SQL ledger (mixed into ``SqlLedger``)."""

    if TYPE_CHECKING:
        _x: Executor

        def _read(self) -> AbstractAsyncContextManager[Executor]: ...

    async def search_runs(self, query: RunQuery) -> RunPage:
        _check(query)
        t = runs_table
        stmt: Any = select(t)
        if query.statuses:
            stmt = stmt.where(t.c.status.in_(list(query.statuses)))
        if query.template is not None:
            stmt = stmt.where(t.c.template == query.template)
        if query.since is not None:
            stmt = stmt.where(t.c.created_at >= query.since)
        if query.until is not None:
            stmt = stmt.where(t.c.created_at < query.until)
        if query.text:
            escaped = (
                query.text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            )
            stmt = stmt.where(func.lower(t.c.inputs).like(f"%{escaped}%", escape="\\"))
        if query.cursor:
            created, run_id = _decode(query.cursor)
            stmt = stmt.where(
                or_(t.c.created_at < created, and_(t.c.created_at == created, t.c.run_id < run_id))
            )
        elif query.offset:
            stmt = stmt.offset(query.offset)
        stmt = stmt.order_by(t.c.created_at.desc(), t.c.run_id.desc()).limit(query.limit + 1)
        compiled = stmt.compile(
            dialect=self._x.dialect, compile_kwargs={"render_postcompile": True}
        )
        async with self._read() as x:
            rows = await x.fetch(str(compiled), compiled.params)
        return _page([Run.from_row(r) for r in rows], query.limit)
