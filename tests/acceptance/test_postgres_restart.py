"""Postgres restarted during a load: workers reconnect and every run finishes.

Two ``stageline worker`` processes advance runs of the 10-node template (each node sleeps) on
a fresh database while this machine's PostgreSQL server is stopped and started again. While it
is down, a CLI command exits 6 with one line naming the host. Afterwards every run ends
``succeeded``, and only nodes in flight at the restart ran twice (the trail is written by the
nodes, outside the workers).

The server is restarted with ``pg_ctlcluster`` (as root, on the local server only); a
``finally`` always starts it again and waits for ``pg_isready``, so no later test finds it down.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest
from _procs import start_worker, stop_workers

QueueRuns = Callable[[dict[str, str], list[str]], Awaitable[list[str]]]

NODES = [f"n{i}" for i in range(1, 11)]
CLI = [sys.executable, "-m", "stageline.cli"]
RUNS = 10
WORKERS = 2
NODE_SLEEP = 0.2
DOWN_FOR = 2.0
TERMINAL = ("succeeded", "failed", "cancelled", "rejected")
"""Seconds the server stays stopped (besides the CLI check made while it is down)."""


def _cluster() -> list[str] | None:
    """``pg_ctlcluster`` arguments for this machine's one server, or None if it cannot be done."""
    conf = Path("/etc/postgresql")
    if (
        shutil.which("pg_ctlcluster") is None
        or shutil.which("pg_isready") is None
        or not conf.is_dir()
        or os.geteuid() != 0
    ):
        return None
    versions = sorted(p.name for p in conf.iterdir() if (p / "main").is_dir())
    if len(versions) != 1:
        return None
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[0], "main"]


def _pg_ready(url: str) -> bool:
    parts = urlsplit(url)
    done = subprocess.run(
        ["pg_isready", "-h", parts.hostname or "127.0.0.1", "-p", str(parts.port or 5432)],
        capture_output=True,
        timeout=10,
    )
    return done.returncode == 0


def _start_server(cluster: list[str], url: str) -> None:
    """Start the server (if it is down) and wait until it accepts connections."""
    deadline = time.monotonic() + 60
    while not _pg_ready(url):
        subprocess.run([*cluster, "start"], capture_output=True, timeout=60, check=False)
        if time.monotonic() > deadline:
            raise AssertionError("PostgreSQL did not come back up")
        time.sleep(0.2)
    # pg_isready says "accepting" a little before a real query can run: connect once.
    while True:
        try:
            with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.serial  # it stops the shared server: after the rest, alone (tests/suite_guards.py)
@pytest.mark.timeout(240)  # a hang guard: nothing here is timed
def test_workers_reconnect_after_a_postgres_restart_and_every_run_finishes(
    tmp_path: Path,
    postgres_url: str,
    worker_env: Callable[..., dict[str, str]],
    queue_runs: QueueRuns,
    run_statuses: Callable[[str], dict[str, str]],
    unfinished_runs: Callable[[str], list[tuple[object, ...]]],
) -> None:
    cluster = _cluster()
    host = urlsplit(postgres_url).hostname or ""
    if cluster is None or host not in ("127.0.0.1", "localhost", "::1"):
        pytest.skip("restarting Postgres needs this machine's own server, pg_ctlcluster, root")
    env = worker_env(postgres_url, STAGELINE_TEST_NODE_SLEEP=str(NODE_SLEEP))
    ids = asyncio.run(queue_runs(env, [f"r{i:02d}" for i in range(RUNS)]))
    trail = tmp_path / "trail.txt"

    def lines() -> list[str]:
        return trail.read_text().splitlines() if trail.exists() else []

    procs = [start_worker(tmp_path, env, tmp_path / f"worker{i}.log") for i in range(WORKERS)]
    down: subprocess.CompletedProcess[str] | None = None
    statuses: dict[str, str] = {}
    try:
        while sum(ln.startswith("end ") for ln in lines()) < 6:  # runs are well under way
            assert all(p.poll() is None for p in procs), "a worker exited before the restart"
            time.sleep(0.05)
        try:
            stopped_at = len(lines())
            subprocess.run(
                [*cluster, "stop", "-m", "fast"], capture_output=True, timeout=60, check=True
            )
            down = subprocess.run(
                [*CLI, "runs"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            time.sleep(DOWN_FOR)
        finally:
            _start_server(cluster, postgres_url)
        up_at = len(lines())
        while not all((statuses := run_statuses(postgres_url)).get(r) in TERMINAL for r in ids):
            assert any(p.poll() is None for p in procs), "every worker exited"
            time.sleep(0.2)
        alive = [p.poll() is None for p in procs]
    finally:
        stop_workers(procs)
        if cluster is not None and not _pg_ready(postgres_url):  # never leave it down
            _start_server(cluster, postgres_url)

    logs = "\n".join(
        (tmp_path / f"worker{i}.log").read_text(errors="replace")[-3000:] for i in range(WORKERS)
    )
    # While the server was down: a clear error naming the host, exit 6.
    assert down is not None
    assert down.returncode == 6, (down.returncode, down.stdout, down.stderr)
    assert "Traceback" not in down.stderr, down.stderr
    assert down.stderr.startswith("error: cannot connect to Postgres"), down.stderr
    assert f"{host}:{urlsplit(postgres_url).port or 5432}" in down.stderr
    # One line of error (and, as every "cannot connect" error has, one line of hint).
    assert len(down.stderr.strip().splitlines()) <= 2, down.stderr
    assert (urlsplit(postgres_url).password or "\0") not in down.stderr

    unfinished = {r: statuses.get(r) for r in ids if statuses.get(r) != "succeeded"}
    assert not unfinished, (
        f"runs not succeeded: {unfinished}: {unfinished_runs(postgres_url)}\n{logs}"
    )
    assert all(alive), f"a worker died instead of reconnecting:\n{logs}"
    assert all(p.returncode == 0 for p in procs), f"a worker did not drain cleanly:\n{logs}"

    ran: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index, line in enumerate(lines()):
        what, run_id, node, _pid = line.split()
        if what == "start":
            ran[(run_id, node)].append(index)
    assert set(ran) == {(r, n) for r in ids for n in NODES}
    for (run_id, node), starts in ran.items():
        # A node ran again only if an earlier start of it was in flight when the server went
        # away: its completion could not be checkpointed. Checkpointed nodes never repeat.
        assert all(stopped_at - 2 * WORKERS * 2 <= i < up_at for i in starts[:-1]), (
            run_id,
            node,
            starts,
            stopped_at,
            up_at,
        )
    repeats = sum(len(s) - 1 for s in ran.values())
    assert repeats <= WORKERS * 2  # at most one in-flight node per job slot
