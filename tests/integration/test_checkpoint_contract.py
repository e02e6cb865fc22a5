"""LangGraph's own contract for a checkpoint saver (``langgraph-checkpoint-conformance``), run
against stageline's saver on SQLite and on Postgres (and in memory: the same saver on SQLite
``:memory:``), with the strict serializer stageline uses."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from stageline.checkpoints import checkpoint_serde
from stageline.ledger import open_backend


def _failures() -> tuple[list[str], Any]:
    failed: list[str] = []

    def on_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failed.append(f"{capability}/{test}: {error}")

    return failed, ProgressCallbacks(on_test_result=on_result)


async def _check(name: str, urls: Any) -> None:
    @checkpointer_test(name=name)
    async def saver() -> AsyncIterator[Any]:
        backend = await open_backend(next(urls), checkpoint_serde())
        try:
            yield backend.saver
        finally:
            await backend.aclose()

    failed, progress = _failures()
    report = await validate(saver, progress=progress)
    assert failed == []
    assert report.passed_all_base(), report.conformance_level()
    assert report.passed_all()
    ran = sum(r.tests_passed for r in report.results.values())
    assert ran >= 30, ran  # the suite ran (not skipped): put, writes, get, list, delete


async def test_the_saver_keeps_langgraphs_contract_on_sqlite(tmp_path: Path) -> None:
    urls = (f"sqlite:///{tmp_path / f'c{i}.db'}" for i in itertools.count())
    await _check("stageline on SQLite", urls)


async def test_the_saver_keeps_langgraphs_contract_in_memory() -> None:
    await _check("stageline in memory", itertools.repeat("memory://"))  # a new database each


async def test_the_saver_keeps_langgraphs_contract_on_postgres(postgres_empty_url: str) -> None:
    urls = itertools.repeat(postgres_empty_url)
    await _check("stageline on Postgres", _emptied(urls))


def _emptied(urls: Any) -> Any:
    """The same database for each suite, its checkpoint tables emptied first."""
    import psycopg

    for url in urls:
        with psycopg.connect(url, autocommit=True) as conn:
            for table in ("stageline_checkpoint_writes", "stageline_checkpoints"):
                if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone() != (None,):
                    conn.execute(f"DELETE FROM {table}")
        yield url
