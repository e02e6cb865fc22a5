"""``history``, ``fork`` and lineage in ``show``, as a user meets them: the CLI as a subprocess."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from stageline.config import Settings, load_settings
from stageline.ledger import open_ledger
from stageline.runner import Runner


def _cli(tmp_path: Path, *args: str, code: int | None = 0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(
        STAGELINE_HOME=str(tmp_path / "home"),
        STAGELINE_MODEL="offline",
        PYTHONIOENCODING="utf-8",
        COLUMNS="200",
    )
    done = subprocess.run(
        [sys.executable, "-m", "stageline.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        encoding="utf-8",
        timeout=120,
        check=False,
    )
    assert "Traceback" not in done.stderr, done.stderr
    if code is not None:
        assert done.returncode == code, (args, done.returncode, done.stdout, done.stderr)
    return done


def _json(tmp_path: Path, *args: str) -> Any:
    return json.loads(_cli(tmp_path, *args).stdout)


def _settings(tmp_path: Path) -> Settings:
    """What ``_cli`` runs under, for this process."""
    env = {"STAGELINE_HOME": str(tmp_path / "home"), "STAGELINE_MODEL": "offline"}
    return load_settings(cwd=tmp_path, env=env)


@pytest.fixture
def finished(tmp_path: Path) -> str:
    """``blog1``, approved by ``ed`` (made in this process: the commands under test read it)."""

    async def made() -> None:
        async with Runner.open(_settings(tmp_path)) as runner:
            await runner.start("blog_post", {"topic": "durable pipelines"}, run_id="blog1")
            await runner.approve("blog1", actor="ed")

    asyncio.run(made())
    return "blog1"


def test_fork_a_finished_blog_post_at_the_draft_step_with_a_new_topic(
    tmp_path: Path, finished: str
) -> None:
    table = _cli(tmp_path, "history", finished).stdout
    for word in ("step", "node", "next", "checkpoint", "research", "outline", "publish"):
        assert word in table, table
    history = _json(tmp_path, "history", finished, "--json")
    draft_step = next(c["step"] for c in history if c["nodes"] == ["draft"])
    assert [c["step"] for c in history] == list(range(-1, 8))
    assert all(
        {"checkpoint_id", "parent_id", "created_at", "values", "changed", "next"} <= set(c)
        for c in history
    )
    before = _json(tmp_path, "show", finished, "--json")

    out = _cli(
        tmp_path,
        "fork",
        finished,
        "--at",
        str(draft_step),
        "-i",
        "topic=gardening",
        "--run-id",
        "fork1",
        code=3,
    ).stdout
    assert "▶ draft" in out and "▶ research" not in out and "▶ outline" not in out, out
    assert "waiting at gate editor_approval" in out

    fork = _json(tmp_path, "show", "fork1", "--json")
    assert fork["records"][0]["node"] == "draft"
    assert {r["node"] for r in fork["records"]} & {"research", "outline"} == set()
    assert fork["state"]["topic"] == "gardening"
    assert fork["lineage"]["forked_from"]["parent_run_id"] == finished
    assert fork["lineage"]["forked_from"]["parent_step"] == draft_step
    shown = _cli(tmp_path, "show", "fork1").stdout
    assert f"forked from run {finished} at step {draft_step}" in shown

    after = _json(tmp_path, "show", finished, "--json")
    assert after["lineage"]["forks"][0]["run_id"] == "fork1"
    after["lineage"] = before["lineage"]
    assert after == before  # the original: records, state, decisions as they were
    assert "forks: fork1 (at step 3)" in _cli(tmp_path, "show", finished).stdout
    assert _json(tmp_path, "history", finished, "--json") == history

    _cli(tmp_path, "approve", "fork1", "--as", "ed2")
    assert _json(tmp_path, "show", "fork1", "--json")["run"]["status"] == "succeeded"


def test_a_detached_fork_is_advanced_by_the_local_worker(tmp_path: Path, finished: str) -> None:
    out = _cli(tmp_path, "fork", finished, "--at", "7", "--run-id", "fork2", "--detach").stdout
    assert "forked run blog1 at step 7 as run fork2" in out and "queued run fork2" in out

    async def status() -> str:  # read in this process: a CLI process per look is slow
        async with open_ledger(_settings(tmp_path).database_url) as ledger:
            return str((await ledger.get_run("fork2")).status)

    while asyncio.run(status()) != "succeeded":
        time.sleep(0.05)  # until the local worker advanced the fork, or pytest-timeout
    assert [r["node"] for r in _json(tmp_path, "show", "fork2", "--json")["records"]] == ["publish"]


BAD = [
    (("fork", "blog1", "--at", "99"), "no step 99"),
    (("fork", "blog1", "--at", "3", "-i", "nope=1"), "unknown input 'nope'"),
    (("fork", "blog1", "--at", "3", "--checkpoint", "x"), "not both"),
    (("fork", "nosuch", "--at", "3"), "no run with id 'nosuch'"),
    (("history", "nosuch"), "no run with id 'nosuch'"),
    (("fork", "blog1", "--at", "3", "--run-id", "../x"), "run id"),
]


def test_bad_history_and_fork_requests_say_what_is_wrong(tmp_path: Path, finished: str) -> None:
    for args, says in BAD:
        done = _cli(tmp_path, *args, code=2)
        assert says in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) <= 2, done.stderr
    assert [r["run_id"] for r in _json(tmp_path, "runs", "--json")] == ["blog1"]
