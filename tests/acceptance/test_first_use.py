"""First use by many processes at once: whoever comes first migrates, the others agree."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from _procs import cli_env, together

from stageline.config import load_settings
from stageline.ledger import open_ledger

URLS = {
    "sqlite": lambda request, tmp: None,  # the default: a file under the project's home
    "postgres": lambda request, tmp: request.getfixturevalue("postgres_empty_url"),
}


@pytest.fixture(params=sorted(URLS))
def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> str | None:
    return URLS[request.param](request, tmp_path)


def test_four_runs_listings_at_once_on_an_empty_database(
    tmp_path: Path, empty_url: str | None
) -> None:
    env = cli_env(tmp_path / "home", empty_url)
    done = together([["runs", "--json"]] * 4, tmp_path, env)
    for proc in done:
        assert (proc.returncode, proc.stderr) == (0, ""), proc
        assert json.loads(proc.stdout) == []


def test_eight_runs_started_at_once_on_an_empty_database(
    tmp_path: Path, empty_url: str | None
) -> None:
    env = cli_env(tmp_path / "home", empty_url)
    done = together(
        [["run", "blog_post", "-i", f"topic=t{i}", "--run-id", f"r{i}"] for i in range(8)],
        tmp_path,
        env,
    )
    for proc in done:
        assert proc.returncode == 3, proc  # each reached its approval gate

    async def listed() -> dict[str, str]:  # read in this process: one CLI process less
        settings = load_settings(cwd=tmp_path, env=env)
        async with open_ledger(settings.database_url) as ledger:
            return {r.run_id: str(r.status) for r in await ledger.list_runs()}

    assert asyncio.run(listed()) == {f"r{i}": "waiting" for i in range(8)}
