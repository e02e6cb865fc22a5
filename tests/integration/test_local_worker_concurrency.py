"""The local worker of a SQLite project advances several queued runs at once (``--concurrency``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stageline.config import Settings
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.worker import run_local_worker

FIXTURE = Path(__file__).parent.parent / "fixtures" / "worker_nodes.py"


def _trail(path: Path) -> list[tuple[str, str, str]]:
    return [tuple(line.split()[:3]) for line in path.read_text().splitlines()]  # type: ignore[misc]


@pytest.mark.parametrize("concurrency", [1, 2])
async def test_local_worker_runs_queued_runs_side_by_side(
    sqlite_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int
) -> None:
    trail = tmp_path / "trail.txt"
    monkeypatch.setenv("STAGELINE_TEST_TRAIL", str(trail))
    monkeypatch.setenv("STAGELINE_TEST_NODE_SLEEP", "0.05")
    async with Runner.open(sqlite_settings) as runner:
        for run_id in ("a1", "a2"):
            await runner.create(str(FIXTURE), {}, run_id=run_id)
    assert await run_local_worker(settings=sqlite_settings, idle_exit=0.2, concurrency=concurrency)
    async with Runner.open(sqlite_settings) as runner:
        for run_id in ("a1", "a2"):
            assert (await runner.ledger.get_run(run_id)).status is RunStatus.SUCCEEDED
    rows = _trail(trail)
    last_end = max(i for i, (what, run, _) in enumerate(rows) if what == "end" and run == "a1")
    second_start = next(
        i for i, (what, run, _) in enumerate(rows) if what == "start" and run == "a2"
    )
    if concurrency == 1:
        assert second_start > last_end  # one after the other
    else:
        assert second_start < last_end  # the second began while the first still ran


async def test_the_local_worker_fires_a_missed_schedule_once_and_advances_its_run(
    sqlite_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STAGELINE_TEST_TRAIL", str(tmp_path / "trail.txt"))
    async with Runner.open(sqlite_settings) as runner:  # due since 1970: missed many times
        cron = await runner.schedules.add(str(FIXTURE), "0 0 1 1 *", now=0.0)
    assert await run_local_worker(settings=sqlite_settings, idle_exit=0.2)
    async with Runner.open(sqlite_settings) as runner:
        [fire] = await runner.ledger.cron_fires(cron.cron_id)
        assert await runner.ledger.fired_by(fire["run_id"]) == cron.cron_id
        assert (await runner.ledger.get_run(fire["run_id"])).status is RunStatus.SUCCEEDED
        later = await runner.ledger.cron(cron.cron_id)
        assert later is not None and (later.next_run_at or 0) > fire["fired_at"]  # from the look
