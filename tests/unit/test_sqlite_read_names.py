"""The read path's copies of the schema's names (it must not import SQLAlchemy) are the schema's."""

from __future__ import annotations

from stageline.ledger import Run
from stageline.ledger._migrations import MIGRATIONS
from stageline.ledger._schema import runs, schema_version
from stageline.ledger._sqlite_read import RUN_COLUMNS, RUNS_TABLE, SCHEMA_VERSION, VERSION_TABLE


def test_the_read_paths_names_are_the_schemas() -> None:
    assert runs.name == RUNS_TABLE
    assert tuple(column.name for column in runs.c) == RUN_COLUMNS
    assert schema_version.name == VERSION_TABLE
    assert len(MIGRATIONS) == SCHEMA_VERSION


def test_every_column_read_is_a_field_of_a_run() -> None:
    assert tuple(Run.__dataclass_fields__) == RUN_COLUMNS
