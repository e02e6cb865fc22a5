"""The in-memory ledger is the SQL ledger on SQLite ``:memory:`` (issue 15, "one ledger"): no
second implementation to drift, and no second connection to a database that cannot have one."""

from __future__ import annotations

import pytest

from stageline.checkpoints import checkpoint_serde
from stageline.errors import ConfigError
from stageline.ledger import MemoryLedger, Run, RunStatus, open_backend, open_ledger
from stageline.ledger._saver import StagelineSaver
from stageline.ledger._sql import SqlLedger
from stageline.ledger._sqlite import SqliteLedger


def _run(run_id: str) -> Run:
    return Run(run_id=run_id, template="t", template_version="1", status=RunStatus.RUNNING)


async def test_each_memory_ledger_is_the_sql_ledger_on_a_database_of_its_own() -> None:
    one, two = MemoryLedger(), MemoryLedger()  # made outside any await: ready, migrated
    assert isinstance(one, SqliteLedger) and isinstance(one, SqlLedger)
    await one.create_run(_run("only-in-one"))
    assert [r.run_id for r in await one.list_runs()] == ["only-in-one"]
    assert await two.list_runs() == []
    assert await one.schema_version() == await two.schema_version() > 0
    await one.close()
    await two.close()


@pytest.mark.parametrize("url", ["memory://", "sqlite:///:memory:"])
async def test_a_memory_backend_is_the_same_ledger_and_saver(url: str) -> None:
    backend = await open_backend(url, checkpoint_serde())
    try:
        assert isinstance(backend.ledger, MemoryLedger)
        assert isinstance(backend.saver, StagelineSaver)
    finally:
        await backend.aclose()


@pytest.mark.parametrize("url", ["memory://", "sqlite:///:memory:"])
async def test_a_reader_refuses_a_memory_database_it_would_open_empty(url: str) -> None:
    with pytest.raises(ConfigError, match="nothing here to read"):
        async with open_ledger(url):
            pass
