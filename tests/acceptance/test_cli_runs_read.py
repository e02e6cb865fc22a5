"""``stageline runs`` reads a current SQLite ledger with sqlite3 alone (issue 28: a third of
its instructions) and prints exactly what the ledger's store prints: a URL with an option is
always read through the store, so the two outputs of the same ledger are compared here."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import pytest

from sqlite_runs import write_runs
from stageline.ledger import Run, RunStatus

Cli = Callable[..., CompletedProcess[str]]

RUNS = [
    Run(
        run_id=f"{status}-{template}",
        template=template,
        template_version="1",
        status=status,
        inputs={"topic": f"t{i}"},
        created_at=1_000.0 + i,
        updated_at=1_001.0 + i,
        finished_at=1_002.0 + i if status in (RunStatus.SUCCEEDED, RunStatus.FAILED) else None,
        error="it broke" if status is RunStatus.FAILED else None,
        last_seq=i,
    )
    for i, (status, template) in enumerate(
        [
            (RunStatus.SUCCEEDED, "blog_post"),
            (RunStatus.FAILED, "sdlc"),
            (RunStatus.WAITING, "blog_post"),
            (RunStatus.QUEUED, "sdlc"),
            (RunStatus.SUCCEEDED, "sdlc"),
            (RunStatus.CANCELLED, "blog_post"),
        ]
    )
]


@pytest.fixture
def url(tmp_path: Path) -> str:
    """The project's default ledger, made by the store, holding runs of several statuses."""
    made = f"sqlite:///{tmp_path / 'home' / 'stageline.db'}"
    asyncio.run(write_runs(made, RUNS))
    return made


@pytest.mark.parametrize(
    "filters",
    [
        (),
        ("--status", "succeeded"),
        ("--template", "sdlc"),
        ("--limit", "2"),
        ("--status", "succeeded", "--template", "sdlc", "--limit", "1"),
    ],
    ids=lambda f: " ".join(f) or "all",
)
def test_runs_json_is_the_same_read_either_way(
    cli: Cli, url: str, filters: tuple[str, ...]
) -> None:
    fast = cli("runs", "--json", *filters)
    store = cli("runs", "--json", *filters, db=f"{url}?busy_timeout=10")
    assert (fast.returncode, fast.stderr) == (store.returncode, store.stderr) == (0, "")
    assert fast.stdout == store.stdout
    assert '"run_id"' in fast.stdout


def test_runs_on_a_missing_ledger_still_makes_it(cli: Cli, tmp_path: Path) -> None:
    done = cli("runs")
    assert (done.returncode, done.stdout.strip()) == (
        0,
        "no runs yet; start one with `stageline run TEMPLATE`",
    )
    assert (tmp_path / "home" / "stageline.db").is_file()
