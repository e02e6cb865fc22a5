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
import subprocess
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from _procs import start_worker, stop_workers

QueueRuns = Callable[[dict[str, str], list[str]], Awaitable[list[str]]]
NODES = [f"n{i}" for i in range(1, 11)]
CI_RUNS = 20
RUNS = int(os.environ.get("STAGELINE_CHAOS_RUNS") or CI_RUNS)
FULL = RUNS > CI_RUNS
KILL_SECONDS = float(os.environ.get("STAGELINE_CHAOS_KILL_SECONDS") or (1e9 if FULL else 10))
KILL_EVERY = 2.5
TERMINAL = ("succeeded", "failed", "cancelled", "rejected")
WORKERS = 4


@pytest.mark.timeout(3600 if FULL else 300)  # a hang guard: nothing here is timed
@pytest.mark.parametrize(
    "runs", [pytest.param(RUNS, marks=[pytest.mark.slow] if FULL else [], id=f"{RUNS}-runs")]
)
def test_killing_workers_at_random_loses_no_run_and_repeats_no_checkpointed_node(
    tmp_path: Path,
    postgres_url: str,
    runs: int,
    worker_env: Callable[..., dict[str, str]],
    queue_runs: QueueRuns,
    run_statuses: Callable[[str], dict[str, str]],
    unfinished_runs: Callable[[str], list[tuple[object, ...]]],
) -> None:
    env = worker_env(postgres_url, STAGELINE_TEST_NODE_SLEEP="0.05")
    ids = asyncio.run(queue_runs(env, [f"c{i:03d}" for i in range(runs)]))
    procs: list[subprocess.Popen[bytes]] = []
    killed_at: dict[int, int] = {}
    """Killed worker pid -> trail lines written when it was dead for sure."""
    trail = tmp_path / "trail.txt"

    def start() -> subprocess.Popen[bytes]:
        proc = start_worker(tmp_path, env, tmp_path / f"worker{len(procs)}.log")
        procs.append(proc)
        return proc

    def lines() -> list[str]:
        return trail.read_text().splitlines() if trail.exists() else []

    live = [start() for _ in range(WORKERS)]
    rng = random.Random(runs)
    began = time.monotonic()  # when to kill is the test's input; nothing here is timed
    try:
        next_kill = began + KILL_EVERY
        while True:
            statuses = run_statuses(postgres_url)
            if all(statuses.get(r) in TERMINAL for r in ids):
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
    finally:
        stop_workers(procs, alive=live)

    assert killed_at, "no worker was killed"
    unfinished = {r: statuses.get(r) for r in ids if statuses.get(r) != "succeeded"}
    assert not unfinished, f"runs not succeeded: {unfinished}: {unfinished_runs(postgres_url)}"
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
                f"run {run_id} advanced by {previous} and {pid} at once (line {index})"
            )
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
