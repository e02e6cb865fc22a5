"""The SQL statements of ``SqlLedger`` and its parts, built once at import (compiling is slow;
``SqlLedger._sql`` caches each compiled form by identity)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)

from stageline.ledger._schema import (
    api_runs,
    checkpoints,
    effects,
    events,
    lineage,
    node_records,
    runs,
    schema_version,
    sink_cursors,
    thread_meta,
    waits,
)
from stageline.ledger.records import RunStatus

__all__ = [
    "BUMP_SEQ",
    "CANCEL_FLAG",
    "DELETE_RUN",
    "HAS_CHECKPOINT",
    "INSERT_EVENTS",
    "INSERT_VERSION",
    "MAX_SEQ",
    "RELEASE_LEASE",
    "RENEW_LEASE",
    "REQUEST_CANCEL",
    "SELECT_EVENTS",
    "SELECT_NODES",
    "SELECT_RUN",
    "SELECT_VERSION",
    "SET_SEQ",
    "STEAL_LEASE",
    "TAKE_LEASE",
    "TERMINAL",
    "cancels_flagged",
    "latest_checkpoint_id",
]

INSERT_VERSION = insert(schema_version)
INSERT_EVENTS = insert(events)
DELETE_RUN = tuple(
    delete(t).where(t.c.run_id == bindparam("run_id"))
    for t in (
        events,
        node_records,
        waits,
        effects,
        sink_cursors,
        lineage,
        thread_meta,
        api_runs,
        runs,
    )
)
SELECT_VERSION = select(func.max(schema_version.c.version).label("v"))
SELECT_RUN = select(runs).where(runs.c.run_id == bindparam("run_id"))
SELECT_NODES = (
    select(node_records)
    .where(node_records.c.run_id == bindparam("run_id"))
    .order_by(node_records.c.started_at, node_records.c.node)
)
SELECT_EVENTS = (
    select(events)
    .where(and_(events.c.run_id == bindparam("run_id"), events.c.seq > bindparam("after")))
    .order_by(events.c.seq)
)
MAX_SEQ = select(func.coalesce(func.max(events.c.seq), literal_column("0")).label("s")).where(
    events.c.run_id == bindparam("run_id")
)
BUMP_SEQ = (
    update(runs)
    .where(runs.c.run_id == bindparam("run_id"))
    .values(last_seq=MAX_SEQ.scalar_subquery() + bindparam("n"))
    .returning(runs.c.last_seq)
)
SET_SEQ = update(runs).where(runs.c.run_id == bindparam("run_id")).values(last_seq=bindparam("seq"))
TAKE_LEASE = (
    update(runs)
    .where(
        and_(
            runs.c.run_id == bindparam("run_id"),
            or_(
                runs.c.lease_holder.is_(None),
                runs.c.lease_expires_at < bindparam("now"),
                runs.c.lease_holder == bindparam("holder"),
            ),
        )
    )
    .values(lease_holder=bindparam("holder"), lease_expires_at=bindparam("expires"))
)
STEAL_LEASE = (
    update(runs)
    .where(and_(runs.c.run_id == bindparam("run_id"), runs.c.lease_holder == bindparam("old")))
    .values(lease_holder=bindparam("holder"), lease_expires_at=bindparam("expires"))
)
RENEW_LEASE = (
    update(runs)
    .where(and_(runs.c.run_id == bindparam("run_id"), runs.c.lease_holder == bindparam("holder")))
    .values(lease_expires_at=bindparam("expires"))
)
RELEASE_LEASE = (
    update(runs)
    .where(and_(runs.c.run_id == bindparam("run_id"), runs.c.lease_holder == bindparam("holder")))
    .values(lease_holder=bindparam("none_holder"), lease_expires_at=bindparam("none_expires"))
)
TERMINAL = [s for s in RunStatus if s.terminal]
REQUEST_CANCEL = (
    update(runs)
    .where(
        and_(
            runs.c.run_id == bindparam("run_id"),
            runs.c.status.not_in([bindparam(f"t{i}") for i in range(len(TERMINAL))]),
        )
    )
    .values(cancel_requested=bindparam("flag"), updated_at=bindparam("now"))
)
HAS_CHECKPOINT = select(
    exists()
    .where(
        and_(
            checkpoints.c.thread_id == bindparam("run_id"),
            checkpoints.c.checkpoint_ns == literal_column("''"),
        )
    )
    .label("found")
)
CANCEL_FLAG = select(runs.c.cancel_requested).where(runs.c.run_id == bindparam("run_id"))
_FLAGGED: dict[int, Select[tuple[str]]] = {}


def cancels_flagged(run_ids: list[str]) -> tuple[Select[tuple[str]], dict[str, str]]:
    """A query for the ids among ``run_ids`` (not empty) whose cancel flag is set, and its
    parameters: one statement for all the runs a commit watches. Its parameters ``r0``.. are as
    many as ``run_ids`` rounded up to a power of two (the last id repeated), so a few
    statements serve every count and each is built once."""
    size = 1 << (len(run_ids) - 1).bit_length()
    stmt = _FLAGGED.get(size)
    if stmt is None:
        ids: list[Any] = [bindparam(f"r{i}") for i in range(size)]
        stmt = select(runs.c.run_id).where(and_(runs.c.run_id.in_(ids), runs.c.cancel_requested))
        _FLAGGED[size] = stmt
    return stmt, {f"r{i}": run_ids[min(i, len(run_ids) - 1)] for i in range(size)}


def latest_checkpoint_id(thread: Any, ns: Any) -> Select[tuple[str]]:
    """The id of the newest checkpoint of ``thread`` in namespace ``ns`` (bind parameters, named
    as the caller's statement names them); checkpoint ids sort by the time they were made."""
    return select(func.max(checkpoints.c.checkpoint_id).label("checkpoint_id")).where(
        checkpoints.c.thread_id == thread, checkpoints.c.checkpoint_ns == ns
    )
