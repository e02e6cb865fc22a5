"""The ledger schema, defined once in SQLAlchemy Core, and its numbered migrations."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)
from sqlalchemy.engine.interfaces import Dialect
from sqlalchemy.schema import CreateIndex, CreateTable, Index

__all__ = ["MIGRATIONS", "events", "metadata", "node_records", "runs", "schema_version"]

metadata = MetaData()

schema_version = Table(
    "stageline_schema_version",
    metadata,
    Column("version", Integer, primary_key=True),
    Column("applied_at", Float, nullable=False),
)

runs = Table(
    "stageline_runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("template", String(200), nullable=False),
    Column("template_version", String(100), nullable=False),
    Column("status", String(20), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("inputs", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("error", Text),
    Column("failure_phase", String(50)),
    Column("failed_node", String(200)),
    Column("lease_holder", String(200)),
    Column("lease_expires_at", Float),
    Column("cancel_requested", Boolean, nullable=False),
    Column("last_seq", Integer, nullable=False),
)

node_records = Table(
    "stageline_node_records",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("task_id", String(100), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("try_no", Integer, primary_key=True),
    Column("node", String(200), nullable=False),
    Column("stage", String(300), nullable=False),
    Column("status", String(20), nullable=False),
    Column("started_at", Float, nullable=False),
    Column("finished_at", Float),
    Column("metrics", Text, nullable=False),
    Column("error", Text),
    Column("failure_phase", String(50)),
)

events = Table(
    "stageline_events",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("ts", Float, nullable=False),
    Column("kind", String(100), nullable=False),
    Column("category", String(20), nullable=False),
    Column("level", String(20), nullable=False),
    Column("node", String(200)),
    Column("message", Text, nullable=False),
    Column("data", Text, nullable=False),
)

_indexes = [
    Index("ix_stageline_runs_status", runs.c.status, runs.c.created_at),
    Index("ix_stageline_runs_template", runs.c.template, runs.c.created_at),
]


def _v1(dialect: Dialect) -> list[str]:
    ddl = [str(CreateTable(t, if_not_exists=True).compile(dialect=dialect))
           for t in (runs, node_records, events)]
    ddl += [str(CreateIndex(ix, if_not_exists=True).compile(dialect=dialect)) for ix in _indexes]
    return ddl


MIGRATIONS: Sequence[Callable[[Dialect], list[str]]] = (_v1,)
"""Migration N (1-based) returns the DDL statements that take schema N-1 to N."""
