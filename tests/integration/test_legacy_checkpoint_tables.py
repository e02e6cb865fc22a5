"""A database that still holds LangGraph's checkpoint tables (the release before stageline's
own store) is refused with what to do: `stageline db upgrade` converts it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.errors import StorageError
from stageline.ledger import open_backend


async def test_a_sqlite_database_with_langgraphs_tables_must_be_upgraded(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    opened = await open_backend(f"sqlite:///{path}", checkpoint_serde())  # a current one opens
    await opened.aclose()
    with sqlite3.connect(path) as db:  # what langgraph-checkpoint-sqlite made
        db.execute("CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB)")
    with pytest.raises(StorageError, match="run `stageline db upgrade` once to convert it"):
        await open_backend(f"sqlite:///{path}", checkpoint_serde())
