"""``stageline prune --vacuum``: the runs go, and the SQLite file gives their space back."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, TypedDict

from conftest import Cli  # the `cli` fixture's type
from stageline.config import load_settings
from stageline.ledger._sqlite import sqlite_path
from stageline.runner import Runner
from stageline.templates import Template


class Ballast(TypedDict, total=False):
    ballast: str


async def fill(state: Ballast, ctx: Any) -> dict[str, Any]:
    return {"ballast": ctx.run_id.ljust(100_000, "x")}


async def _runs(tmp_path: Path, env: dict[str, str], count: int) -> str:
    settings = load_settings(cwd=tmp_path, env=env)
    template = Template("ballast", state=Ballast).add_stage("fill", fill)
    async with Runner.open(settings) as runner:
        for i in range(count):
            await runner.start(template, {}, run_id=f"b{i}")
    return settings.database_url


def test_prune_vacuum_shrinks_the_sqlite_file(
    cli: Cli, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    path = sqlite_path(asyncio.run(_runs(tmp_path, cli_env, 20)))
    before = path.stat().st_size
    assert before > 2_000_000  # 20 runs of 100 kB each
    time.sleep(1.1)  # the runs are older than `--older-than` allows
    pruned = cli("prune", "--older-than", "1s", "--vacuum", "--json")
    assert pruned.returncode == 0, (pruned.stdout, pruned.stderr)
    report = json.loads(pruned.stdout)
    assert len(report["pruned"]) == 20
    assert report["size_after"] < before - 1_500_000 <= report["size_before"] - 1_500_000
    assert path.stat().st_size == report["size_after"]
    again = cli("prune", "--older-than", "1s", "--vacuum")
    assert again.returncode == 0 and "pruned 0 run(s)" in again.stdout, again.stdout
    assert "vacuumed: the database was" in again.stdout, again.stdout
