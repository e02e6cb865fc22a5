"""The ledger's numbered migrations: migration N returns the DDL that takes schema N-1 to N.

The tables are defined once, in ``_schema``; a new migration is appended to ``MIGRATIONS``
(never inserted or changed: databases in use have applied the ones before it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.schema import CreateIndex, CreateTable

from stageline.ledger._schema import (
    api_runs,
    assistant_versions,
    assistants,
    chat_messages,
    chat_once,
    chat_secrets,
    checkpoint_blobs,
    checkpoint_writes,
    checkpoints,
    cron_fires,
    crons,
    effects,
    events,
    index_api_runs,
    indexes_chat,
    indexes_lineage,
    indexes_runs_created,
    indexes_v1,
    indexes_v2,
    indexes_v3,
    indexes_v4,
    lineage,
    node_records,
    outcomes,
    runs,
    sessions,
    sink_cursors,
    sinks,
    thread_meta,
    tokens,
    waits,
)

__all__ = ["MIGRATIONS"]


def _v1(dialect: Dialect) -> list[str]:
    ddl = [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
        for t in (runs, node_records, events)
    ]
    ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in indexes_v1]
    return ddl


def _v2(dialect: Dialect) -> list[str]:
    ddl = [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect)) for t in (waits, effects)
    ]
    ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in indexes_v2]
    return ddl


def _v3(dialect: Dialect) -> list[str]:
    ddl = [str(CreateTable(outcomes, if_not_exists=True).compile(dialect=dialect))]
    ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in indexes_v3]
    return ddl


def _v4_sink_cursors(dialect: Dialect) -> list[str]:
    ddl = [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
        for t in (sinks, sink_cursors)
    ]
    ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in indexes_v4]
    return ddl


def _v6_lineage(dialect: Dialect) -> list[str]:
    ddl = [str(CreateTable(lineage, if_not_exists=True).compile(dialect=dialect))]
    ddl += [
        str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in indexes_lineage
    ]
    return ddl


def _v7_tokens(dialect: Dialect) -> list[str]:
    return [str(CreateTable(tokens, if_not_exists=True).compile(dialect=dialect))]


def _v8_runs_created(dialect: Dialect) -> list[str]:
    return [
        str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect))
        for ix in indexes_runs_created
    ]


def _v9_thread_meta(dialect: Dialect) -> list[str]:
    ddl = [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
        for t in (thread_meta, api_runs)
    ]
    return [*ddl, str(CreateIndex(index_api_runs, if_not_exists=True).compile(dialect=dialect))]


def _v10_chat(dialect: Dialect) -> list[str]:
    ddl = [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
        for t in (chat_messages, chat_once, chat_secrets)
    ]
    ddl += [
        str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in indexes_chat
    ]
    return ddl


def _v11_checkpoints(dialect: Dialect) -> list[str]:
    return [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
        for t in (checkpoints, checkpoint_writes)
    ]


def _v12_checkpoint_blobs(dialect: Dialect) -> list[str]:
    return [str(CreateTable(checkpoint_blobs, if_not_exists=True).compile(dialect=dialect))]


def _v13_sessions(dialect: Dialect) -> list[str]:
    made = [str(CreateTable(sessions, if_not_exists=True).compile(dialect=dialect))]
    return made + [
        str(CreateIndex(i, if_not_exists=True).compile(dialect=dialect)) for i in sessions.indexes
    ]


def _v14_assistants(dialect: Dialect) -> list[str]:
    """Schema version 13: LangGraph assistants and their versions."""
    return [
        str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
        for t in (assistants, assistant_versions)
    ]


def _v15_crons(dialect: Dialect) -> list[str]:
    """Schedules and their firings (schema version 14)."""
    tables = (crons, cron_fires)
    made = [str(CreateTable(t, if_not_exists=True).compile(dialect=dialect)) for t in tables]
    return made + [
        str(CreateIndex(i, if_not_exists=True).compile(dialect=dialect))
        for t in tables
        for i in t.indexes
    ]


MIGRATIONS: Sequence[Callable[[Dialect], list[str]]] = (
    _v1,
    _v2,
    _v3,
    _v4_sink_cursors,
    _v6_lineage,
    _v7_tokens,
    _v8_runs_created,
    _v9_thread_meta,
    _v10_chat,
    _v11_checkpoints,
    _v12_checkpoint_blobs,
    _v13_sessions,
    _v14_assistants,
    _v15_crons,
)
"""Migration N (1-based) returns the DDL statements that take schema N-1 to N."""
