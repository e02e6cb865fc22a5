"""Another process holds the SQLite database's write lock: commands say it is busy (exit 6)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _procs import cli, cli_env

HOLDER = """
import sqlite3
import sys
import time
from pathlib import Path

db, ready, release = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
conn = sqlite3.connect(db, isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
ready.touch()
while not release.exists():
    time.sleep(0.01)
conn.execute("ROLLBACK")
"""


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    db = tmp_path / "home" / "stageline.db"
    env = cli_env(tmp_path / "home", f"sqlite:///{db}?busy_timeout=0.2")
    done = cli(["run", "blog_post", "-i", "topic=locks", "--run-id", "held"], tmp_path, env)
    assert done.returncode == 3, done  # waiting at its approval gate
    return db, env


@pytest.fixture
def held(tmp_path: Path, project: tuple[Path, dict[str, str]]) -> Iterator[Callable[[], None]]:
    """A process holding ``BEGIN EXCLUSIVE`` (WAL mode) on the project's database; calling
    what this yields makes it let go (and waits until it has)."""
    db, _ = project
    (tmp_path / "holder.py").write_text(HOLDER)
    ready, release = tmp_path / "ready", tmp_path / "release"
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "holder.py"), str(db), str(ready), str(release)]
    )
    try:
        while not ready.exists():
            assert proc.poll() is None, "the lock holder stopped"
            time.sleep(0.01)

        def let_go() -> None:
            release.touch()
            proc.wait(timeout=30)

        yield let_go
    finally:
        release.touch()
        proc.wait(timeout=30)


def _busy(done: subprocess.CompletedProcess[str], db: Path) -> None:
    assert done.returncode == 6, done
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "Traceback" not in line, line
    assert str(db) in line and "busy" in line and "write lock" in line, line


def test_run_and_approve_on_a_locked_database_exit_6_and_change_nothing(
    tmp_path: Path, project: tuple[Path, dict[str, str]], held: Callable[[], None]
) -> None:
    db, env = project
    _busy(cli(["run", "blog_post", "-i", "topic=again", "--run-id", "second"], tmp_path, env), db)
    _busy(cli(["approve", "held"], tmp_path, env), db)
    shown = cli(["show", "held", "--json"], tmp_path, env)  # readers still read (WAL)
    assert shown.returncode == 0, shown
    held()  # the lock goes away: nothing was half-done
    listed = cli(["runs", "--json"], tmp_path, env)
    assert '"second"' not in listed.stdout
    assert '"status": "waiting"' in cli(["show", "held", "--json"], tmp_path, env).stdout
    assert cli(["approve", "held"], tmp_path, env).returncode == 0


def test_a_bad_busy_timeout_is_a_usage_error(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", f"sqlite:///{tmp_path / 'x.db'}?busy_timeout=soon")
    done = cli(["runs"], tmp_path, env)
    assert done.returncode == 2 and "busy_timeout" in done.stderr, done
