"""First use by many processes at once: whoever comes first migrates, the others agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _procs import cli, cli_env, together

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
    listed = cli(["runs", "--json"], tmp_path, env)
    assert sorted(r["run_id"] for r in json.loads(listed.stdout)) == [f"r{i}" for i in range(8)]
    assert {r["status"] for r in json.loads(listed.stdout)} == {"waiting"}
