"""Chaos: 4 ``stageline worker`` processes advance runs of a 10-node template on Postgres while
one random worker is SIGKILLed and restarted every few seconds.

All runs end ``succeeded``; no node whose completion was checkpointed runs twice (only a node
in flight in a killed worker may run again); no run is advanced by two workers at once (a
worker's lines for a run only appear after the previous worker of that run was killed). The
trail is written by the nodes, outside the workers.

CI size: 20 runs, kills for 10 s. Full size: ``STAGELINE_CHAOS_RUNS=200`` (marked slow), with
``STAGELINE_CHAOS_KILL_SECONDS`` to change how long the kills go on (default: until all end).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import psycopg
import pytest

from stageline.config import load_settings
from stageline.runner import Runner
from stageline.worker import defer_run, ensure_queue_schema, queue_app

FIXTURE = Path(__file__).parent.parent / "fixtures" / "worker_nodes.py"
NODES = [f"n{i}" for i in range(1, 11)]
CLI = [sys.executable, "-m", "stageline.cli"]
CI_RUNS = 20
RUNS = int(os.environ.get("STAGELINE_CHAOS_RUNS") or CI_RUNS)
FULL = RUNS > CI_RUNS
KILL_SECONDS = float(os.environ.get("STAGELINE_CHAOS_KILL_SECONDS") or (1e9 if FULL else 10))
KILL_EVERY = 2.5
WORKERS = 4


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(STAGELINE_HOME=str(tmp_path / ".stageline"), STAGELINE_DATABASE_URL=url,
               STAGELINE_TEST_TRAIL=str(tmp_path / "trail.txt"),
               STAGELINE_TEST_NODE_SLEEP="0.05", STAGELINE_RETENTION="off")
    return env


async def _queue_runs(env: dict[str, str], n: int) -> list[str]:
    settings = load_settings(cwd=Path(env["STAGELINE_HOME"]).parent, env=env)
    await ensure_queue_schema(settings.database_url)
    app = queue_app(settings.database_url)
    ids = [f"c{i:03d}" for i in range(n)]
    async with Runner.open(settings) as runner, app.open_async():
        for i, run_id in enumerate(ids):
            await runner.create(str(FIXTURE), {"seed": i}, run_id=run_id)
            await defer_run(app, run_id)
    return ids


def _statuses(url: str) -> dict[str, str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT run_id, status FROM stageline_runs").fetchall()
    return {str(r): str(s) for r, s in rows}


def _errors(url: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT run_id, status, failure_phase, error, lease_holder "
                            "FROM stageline_runs WHERE status <> 'succeeded'").fetchall()


@pytest.mark.parametrize(
    "runs", [pytest.param(RUNS, marks=[pytest.mark.slow] if FULL else [], id=f"{RUNS}-runs")])
def test_killing_workers_at_random_loses_no_run_and_repeats_no_checkpointed_node(
    tmp_path: Path, postgres_url: str, runs: int
) -> None:
    env = _env(tmp_path, postgres_url)
    ids = asyncio.run(_queue_runs(env, runs))
    procs: list[subprocess.Popen[bytes]] = []
    killed_at: dict[int, int] = {}
    """Killed worker pid -> trail lines written when it was dead for sure."""
    trail = tmp_path / "trail.txt"

    def start() -> subprocess.Popen[bytes]:
        with (tmp_path / f"worker{len(procs)}.log").open("wb") as log:
            proc = subprocess.Popen([*CLI, "worker", "--concurrency", "2"], cwd=tmp_path,
                                    env=env, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    def lines() -> list[str]:
        return trail.read_text().splitlines() if trail.exists() else []

    live = [start() for _ in range(WORKERS)]
    rng = random.Random(runs)
    began = time.monotonic()
    deadline = began + (600 if FULL else 60) + min(KILL_SECONDS, 600)
    try:
        next_kill = began + KILL_EVERY
        while time.monotonic() < deadline:
            statuses = _statuses(postgres_url)
            if all(statuses.get(r) == "succeeded" for r in ids):
                break
            now = time.monotonic()
            if now >= next_kill and now - began < KILL_SECONDS:
                victim = live.pop(rng.randrange(len(live)))
                victim.kill()
                victim.wait(timeout=30)
                killed_at[victim.pid] = len(lines())
                live.append(start())
                next_kill = now + KILL_EVERY
            time.sleep(0.2)
        statuses = _statuses(postgres_url)
    finally:
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    assert killed_at, "no worker was killed"
    unfinished = {r: statuses.get(r) for r in ids if statuses.get(r) != "succeeded"}
    assert not unfinished, f"runs not succeeded: {unfinished}: {_errors(postgres_url)}"
    assert all(p.returncode == 0 for p in live), "a worker did not drain cleanly on SIGTERM"

    ran: dict[tuple[str, str], list[int]] = defaultdict(list)
    owner: dict[str, int] = {}
    for index, line in enumerate(lines()):
        what, run_id, node, pid_text = line.split()
        pid = int(pid_text)
        previous = owner.get(run_id)
        if previous is not None and previous != pid:
            # A run changes hands only after its worker died, never while it still wrote.
            assert previous in killed_at and index >= killed_at[previous], (
                f"run {run_id} advanced by {previous} and {pid} at once (line {index})")
        owner[run_id] = pid
        if what == "start":
            ran[(run_id, node)].append(pid)
    assert {run_id for run_id, _ in ran} == set(ids)
    for (run_id, node), pids in ran.items():
        # Each earlier run of a node that ran again was cut short by a kill: its completion
        # was never checkpointed.
        assert all(p in killed_at for p in pids[:-1]), (run_id, node, pids)
    repeats = sum(len(p) - 1 for p in ran.values())
    assert repeats <= 2 * len(killed_at)  # at most each killed worker's in-flight nodes
