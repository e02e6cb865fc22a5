"""Retention: ``Runner.prune`` (and ``stageline prune``) deletes old runs' checkpoints and ledger
rows, keeps young runs, and keeps every run's outcomes (``stats`` reads them)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings
from stageline.errors import RunNotFound, UsageError
from stageline.ledger import Outcome, RunStatus
from stageline.runner import Runner
from stageline.templates import load_template

FIXTURE = Path(__file__).parent.parent / "fixtures" / "worker_nodes.py"


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest) -> Settings:
    fixture = "sqlite_settings" if request.param == "sqlite" else "postgres_settings"
    return request.getfixturevalue(fixture)  # type: ignore[no-any-return]


def _config(run_id: str) -> Any:
    return {"configurable": {"thread_id": run_id, "checkpoint_ns": ""}}


async def _outcomes_of(runner: Runner, run_id: str) -> list[Outcome]:
    return [o for o in await runner.ledger.outcomes() if o.run_id == run_id]


async def test_prune_deletes_old_runs_and_their_checkpoints_and_keeps_outcomes(
    settings: Settings,
) -> None:
    template = load_template(str(FIXTURE))
    async with Runner.open(settings) as runner:
        old = await runner.start(template, {"seed": 1}, run_id="old")
        failed_old = await runner.create(template, {"seed": 2}, run_id="queued-old")
        await runner.ledger.record_outcomes(
            [
                Outcome(
                    run_id="old",
                    task_id="extra",
                    template="worker_nodes",
                    node="n1",
                    stage="n1",
                    status="succeeded",
                    started_at=1.0,
                    finished_at=2.0,
                    latency=1.0,
                )
            ]
        )
        await asyncio.sleep(0.05)
        cutoff = time.time()
        await asyncio.sleep(0.05)
        young = await runner.start(template, {"seed": 3}, run_id="young")
        assert old.status is RunStatus.SUCCEEDED and young.status is RunStatus.SUCCEEDED
        saver = runner.backend.saver
        assert await saver.aget_tuple(_config("old")) is not None
        kept_outcomes = await _outcomes_of(runner, "old")
        assert kept_outcomes

        report = await runner.prune(older_than=60, now=cutoff + 60)

        assert report.run_ids == ["old"]  # the queued one is not a default status
        with pytest.raises(RunNotFound):
            await runner.ledger.get_run("old")
        assert await runner.ledger.node_records("old") == []
        assert await runner.ledger.events("old") == []
        assert await saver.aget_tuple(_config("old")) is None
        assert await _outcomes_of(runner, "old") == kept_outcomes
        assert (await runner.ledger.get_run("young")).status is RunStatus.SUCCEEDED
        assert await saver.aget_tuple(_config("young")) is not None
        assert len(await runner.ledger.node_records("young")) == 10

        queued = await runner.prune(older_than=60, now=cutoff + 60, statuses=["queued"])
        assert queued.run_ids == [failed_old.run_id]
        with pytest.raises(UsageError, match="running"):
            await runner.prune(older_than=60, statuses=["running"])


async def bloat(runner: Runner, run_id: str, size: int) -> None:
    """Put a checkpoint of ``size`` bytes on the run's thread (pruned with the run)."""
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"ballast": run_id.ljust(size, "x")}
    checkpoint["channel_versions"] = {"ballast": "1"}
    metadata: Any = {"step": 99}
    await runner.backend.saver.aput(_config(run_id), checkpoint, metadata, {"ballast": "1"})


async def test_prune_with_vacuum_gives_the_space_back(settings: Settings) -> None:
    template = load_template(str(FIXTURE))
    async with Runner.open(settings) as runner:
        for i in range(20):
            await runner.start(template, {"seed": i}, run_id=f"big{i}")
            await bloat(runner, f"big{i}", 100_000)
        report = await runner.prune(older_than=60, now=time.time() + 120, vacuum=True)
        assert len(report.run_ids) == 20
        reclaimed = report.reclaimed
        assert reclaimed is not None and reclaimed.before > 0
        if settings.database_url.startswith("sqlite"):
            # the 2 MB of the pruned runs' checkpoints left the file
            assert reclaimed.after < reclaimed.before - 1_500_000, reclaimed
            path = Path(settings.database_url.split(":///", 1)[1])
            assert path.stat().st_size == reclaimed.after
        young = await runner.start(template, {"seed": 1}, run_id="young")
        assert young.status is RunStatus.SUCCEEDED  # the database goes on as before
        assert (await runner.prune(older_than=60)).reclaimed is None  # not asked
