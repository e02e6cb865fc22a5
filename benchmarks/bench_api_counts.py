"""What one LangGraph-SDK round trip costs ``stageline serve``: SQL statements, commits and
the server process's CPU seconds (issue #25).

Run: ``python benchmarks/bench_api_counts.py [--trips N] [--concurrency C]
[--postgres ADMIN_URL] [--profile PREFIX] [--log-sql PREFIX]``.

A real ``stageline serve`` (one process) over ``bench_api.py``'s project (its graph: a node, a
node that calls ``interrupt()``, a node), on a SQLite file and, with ``--postgres``, on a fresh
database made on that server and dropped at the end. The server runs under
``_counted_serve.py``, which counts the statements it sends (SQLite: every statement its
connections run, BEGIN and COMMIT included, and the COMMITs; Postgres: psycopg's
``AsyncCursor`` executes). Postgres's transactions are ``pg_stat_database.xact_commit`` of the
scratch database, read from outside after the backends' statistics settle (they flush when
idle, within ten seconds). CPU: user + system time of the server process from ``/proc``.

After three warm-up round trips, C ``langgraph_sdk`` clients share N round trips
(``threads.create``, ``runs.wait`` to the interrupt, ``runs.wait`` resuming it to the end).
Printed per round trip: statements, commits, the server's CPU ms, and the wall time.
``--profile PREFIX`` writes the server's cProfile statistics over those N round trips to
``PREFIX.<backend>.pstats`` (``python -m pstats``); under the profiler the CPU figure is not
comparable with a run without it. ``--log-sql PREFIX`` writes the statements the server sent
over those round trips to ``PREFIX.<backend>.sql``, one a line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_api import (
    Served,
    _admin,
    fresh_database,
    load,
    round_trip,
    start_stageline,
    stop,
    wait_answering,
)
from langgraph_sdk import get_client

HERE = Path(__file__).resolve().parent
SETTLE = 11.0
"""Seconds an idle Postgres backend may keep its statistics before it flushes them (10 s)."""
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads), from /proc/PID/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def counts(served: Served, where: Path, last: int) -> dict[str, int]:
    """Ask the counting server for its figures (SIGUSR1) and wait for the answer."""
    os.kill(served.proc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            numbers: dict[str, int] = json.loads(where.read_text())
            if numbers["seq"] > last:
                return numbers
        time.sleep(0.02)
    raise SystemExit(f"{served.name} did not report its counts")


def transactions(database_url: str) -> int:
    name = database_url.rsplit("/", 1)[1].split("?")[0]
    with _admin(database_url) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    return int(row[0])


async def drive(served: Served, trips: int, concurrency: int) -> None:
    clients = [get_client(url=served.url, api_key=served.api_key) for _ in range(concurrency)]
    left = iter(range(trips))
    try:

        async def loop(client: Any) -> None:
            for _ in left:
                await round_trip(client)

        await asyncio.gather(*(loop(c) for c in clients))
    finally:
        for client in clients:
            await client.aclose()


def measure(
    backend: str, folder: Path, database_url: str, args: argparse.Namespace
) -> dict[str, float]:
    where = folder / backend
    tally = folder / f"{backend}.counts.json"
    launcher = [sys.executable, str(HERE / "_counted_serve.py"), str(tally)]
    if args.profile:
        launcher += ["--profile", f"{args.profile}.{backend}.pstats"]
    if args.log_sql:
        launcher += ["--log-sql", f"{args.log_sql}.{backend}.sql"]
    served = start_stageline(f"stageline {backend}", where, database_url, 1, [*launcher, "--"])
    try:
        wait_answering(served)
        asyncio.run(drive(served, 3, 1))
        postgres = backend == "postgres"
        if postgres:
            time.sleep(SETTLE)
            xact_before = transactions(database_url)
        before = counts(served, tally, 0)
        cpu_before = cpu_seconds(served.proc.pid)
        began = time.perf_counter()
        asyncio.run(drive(served, args.trips, args.concurrency))
        wall = time.perf_counter() - began
        cpu = cpu_seconds(served.proc.pid) - cpu_before
        after = counts(served, tally, before["seq"])
        if postgres:
            time.sleep(SETTLE)
            commits = transactions(database_url) - xact_before - 1  # less our own read
        else:
            commits = after["commits"] - before["commits"]
    finally:
        stop(served)
    n = args.trips
    return {
        "statements": (after["statements"] - before["statements"]) / n,
        "commits": commits / n,
        "cpu_ms": cpu * 1000 / n,
        "wall_ms": wall * 1000 / n,
    }


def main(args: argparse.Namespace) -> None:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-counts-"))
    print(
        f"{args.trips} round trips at concurrency {args.concurrency}, one server process; "
        f"load before: {load()}",
        flush=True,
    )
    figures = {"sqlite": measure("sqlite", folder, f"sqlite:///{folder / 'bench.db'}", args)}
    if args.postgres:
        with fresh_database("counts", args.postgres) as url:
            figures["postgres"] = measure("postgres", folder, url, args)
    print(f"load after: {load()}")
    print(f"per round trip   {'statements':>10} {'commits':>8} {'server CPU':>11} {'wall':>9}")
    for backend, f in figures.items():
        print(
            f"  {backend:<14} {f['statements']:>10.1f} {f['commits']:>8.1f} "
            f"{f['cpu_ms']:>8.1f} ms {f['wall_ms']:>6.1f} ms"
        )
    print("(Postgres commits: transactions in pg_stat_database, read-only ones included)")
    shutil.rmtree(folder, ignore_errors=True)  # kept after an error: the server's log is there


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trips", type=int, default=40, help="round trips measured (N)")
    parser.add_argument("--concurrency", type=int, default=8, help="SDK clients at once (C)")
    parser.add_argument("--postgres", metavar="ADMIN_URL", help="also Postgres, on this server")
    parser.add_argument("--profile", metavar="PREFIX", help="cProfile the server to PREFIX.*")
    parser.add_argument(
        "--log-sql", metavar="PREFIX", help="the measured trips' statements to PREFIX.<backend>.sql"
    )
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    main(parser.parse_args())
