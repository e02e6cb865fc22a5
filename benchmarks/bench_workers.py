"""stageline workers vs raw LangGraph processes on Postgres: runs/s for 1, 2 and 4 processes.

Run: ``python benchmarks/bench_workers.py [--runs N] [--workers 1,2,4] [--concurrency C]
[--rounds R]`` (defaults: N=60, C=2, R=3; the figures are medians over rounds, the sides
taking turns to go first).

A 10-node no-op graph (each node adds one to a counter), checkpointed to Postgres with
``durability="sync"`` on both sides. For each number of processes K, in this one invocation:

- stageline: N runs are queued (``Runner.create`` + ``defer_run``, as ``run --detach`` does)
  on a fresh database; then K ``stageline worker --concurrency C`` processes start, and the
  clock runs from the first worker's start until the last run is ``succeeded`` (its
  ``finished_at`` in the ledger, which is polled through ``open_backend``).
- raw LangGraph: K processes (this script, ``--raw-child``) each run their share of the N runs
  with ``AsyncPostgresSaver`` over a psycopg pool like stageline's (1..4 connections,
  autocommit, dict rows), C at a time (``asyncio.gather`` under a semaphore), on a fresh
  database set up (``await saver.setup()``) beforehand; the clock runs from the first
  process's start until the last run ends.

Both clocks include starting the Python processes (imports, connecting), as a worker fleet
pays it; "busy" figures leave it out: first node started to last run finished. Each side gets
a database of its own per measurement (``stageline_bench_<pid>_...`` on the server at
``STAGELINE_TEST_POSTGRES``, default ``postgresql://postgres@127.0.0.1:5432/test``), dropped
right after, and any left over on exit or error. Worker processes run in their own process
groups and are killed on any error.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

NODES = 10
ADMIN_URL = os.environ.get("STAGELINE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DB_PREFIX = f"stageline_bench_{os.getpid()}_"
POLL = 0.25
"""Seconds between two looks at the ledger while stageline workers run (the clock stops at the
last run's ``finished_at``, not at the look that saw it: a slow poll only costs this process
less CPU, which the workers share on a small machine)."""

TEMPLATE = textwrap.dedent(f'''\
    """bench_workers: {NODES} no-op nodes in a row (each adds one to a counter)."""

    from typing import Any, TypedDict

    from stageline import Template

    NODES = [f"n{{i}}" for i in range({NODES})]


    class State(TypedDict, total=False):
        n: int


    def _make(name: str) -> Any:
        async def step(state: State, ctx: Any) -> State:
            return {{"n": state.get("n", 0) + 1}}

        step.__name__ = step.__qualname__ = name
        return step


    template = Template("bench_workers", state=State, version="1")
    for name in NODES:
        template.add_stage(name, _make(name))
    template.add_sequence(*NODES)
''')


# -- the raw side: one process ----------------------------------------------------------------


async def raw_child(url: str, prefix: str, count: int, concurrency: int) -> dict[str, float]:
    """Run ``count`` raw LangGraph graphs, ``concurrency`` at a time; when they began and ended."""
    from typing import TypedDict

    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from langgraph.graph import END, START, StateGraph
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    class State(TypedDict, total=False):
        n: int

    def make(name: str) -> Any:
        async def step(state: State) -> State:
            return {"n": state.get("n", 0) + 1}

        step.__name__ = name
        return step

    kwargs = {"autocommit": True, "row_factory": dict_row, "prepare_threshold": 0}
    async with AsyncConnectionPool(url, min_size=1, max_size=4, kwargs=kwargs, open=False) as pool:
        await pool.open(wait=True)
        saver = AsyncPostgresSaver(pool)  # type: ignore[arg-type]
        began = time.time()
        graph: StateGraph[Any, Any, Any, Any] = StateGraph(State)
        previous = START
        for i in range(NODES):
            graph.add_node(f"n{i}", make(f"n{i}"))
            graph.add_edge(previous, f"n{i}")
            previous = f"n{i}"
        graph.add_edge(previous, END)
        compiled = graph.compile(checkpointer=saver)
        gate = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:
            async with gate:
                out = await compiled.ainvoke(
                    {"n": 0}, {"configurable": {"thread_id": f"{prefix}-{i}"}}, durability="sync"
                )
                assert out["n"] == NODES, out

        await asyncio.gather(*(one(i) for i in range(count)))
        return {"began": began, "ended": time.time()}


async def raw_setup(url: str) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(url) as saver:
        await saver.setup()


def measure_raw(url: str, runs: int, k: int, concurrency: int, folder: Path) -> dict[str, float]:
    asyncio.run(raw_setup(url))
    shares = [runs // k + (1 if i < runs % k else 0) for i in range(k)]
    procs: list[subprocess.Popen[str]] = []
    try:
        started = time.time()
        for i, share in enumerate(shares):
            with (folder / f"raw{k}-{i}.log").open("w") as err:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            __file__,
                            "--raw-child",
                            url,
                            f"p{i}",
                            str(share),
                            str(concurrency),
                        ],
                        stdout=subprocess.PIPE,
                        stderr=err,
                        text=True,
                        start_new_session=True,
                    )
                )
        reports = []
        for i, proc in enumerate(procs):
            out, _ = proc.communicate(timeout=max(120, runs * 2))
            if proc.returncode != 0:
                raise RuntimeError(
                    f"raw process {i} exited {proc.returncode}:\n"
                    + _tail(folder / f"raw{k}-{i}.log")
                )
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        _kill(procs)
    ended = max(r["ended"] for r in reports)
    began = min(r["began"] for r in reports)
    return {"wall": ended - started, "busy": ended - began}


# -- the stageline side -----------------------------------------------------------------------


async def queue_runs(url: str, folder: Path, runs: int, k: int) -> list[str]:
    from stageline.config import load_settings
    from stageline.runner import Runner
    from stageline.worker import defer_run, ensure_queue_schema, queue_app

    settings = load_settings(cwd=folder, env=_stageline_env(url, folder))
    await ensure_queue_schema(url)
    app = queue_app(url)
    ids = [f"w{k}-{i:04d}" for i in range(runs)]
    async with Runner.open(settings) as runner, app.open_async():
        for run_id in ids:
            await runner.create(str(folder / "bench_template.py"), {"n": 0}, run_id=run_id)
            await defer_run(app, run_id)
    return ids


async def wait_succeeded(
    url: str,
    ids: list[str],
    procs: list[subprocess.Popen[bytes]],
    folder: Path,
    k: int,
    timeout: float,
) -> dict[str, float]:
    """Poll the ledger until every run succeeded; then when the first node began and the
    last run finished."""
    from stageline.checkpoints import checkpoint_serde
    from stageline.ledger import open_backend

    backend = await open_backend(url, checkpoint_serde())
    try:
        deadline = time.monotonic() + timeout
        wanted = set(ids)
        while True:
            found = {
                r.run_id: r
                for r in await backend.ledger.list_runs(limit=len(ids) + 10)
                if r.run_id in wanted
            }
            bad = {
                r.run_id: f"{r.status} {r.error or ''}".strip()
                for r in found.values()
                if str(r.status) in ("failed", "cancelled")
            }
            if bad:
                raise RuntimeError(f"runs did not succeed: {bad}")
            if len(found) == len(ids) and all(str(r.status) == "succeeded" for r in found.values()):
                break
            for i, proc in enumerate(procs):
                if proc.poll() is not None:
                    raise RuntimeError(
                        f"worker {i} exited {proc.returncode}:\n"
                        + _tail(folder / f"worker{k}-{i}.log")
                    )
            if time.monotonic() > deadline:
                done = sum(str(r.status) == "succeeded" for r in found.values())
                raise RuntimeError(f"timed out: {done}/{len(ids)} runs succeeded")
            await asyncio.sleep(POLL)
        first = min(
            [min(rec.started_at for rec in await backend.ledger.node_records(r)) for r in ids]
        )
        last = max(r.finished_at or 0.0 for r in found.values())
        return {"began": first, "ended": last}
    finally:
        await backend.aclose()


def measure_stageline(
    url: str, runs: int, k: int, concurrency: int, folder: Path
) -> dict[str, float]:
    ids = asyncio.run(queue_runs(url, folder, runs, k))
    env = _stageline_env(url, folder)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        started = time.time()
        for i in range(k):
            with (folder / f"worker{k}-{i}.log").open("wb") as log:
                procs.append(
                    subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "stageline.cli",
                            "worker",
                            "--concurrency",
                            str(concurrency),
                        ],
                        cwd=folder,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
        span = asyncio.run(wait_succeeded(url, ids, procs, folder, k, max(120, runs * 2)))
        for proc in procs:  # drain: they are idle, so they leave at once
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)
    finally:
        _kill(procs)
    return {"wall": span["ended"] - started, "busy": span["ended"] - span["began"]}


def _stageline_env(url: str, folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(
        STAGELINE_HOME=str(folder / ".stageline"),
        STAGELINE_DATABASE_URL=url,
        STAGELINE_RETENTION="off",
    )
    return env


# -- databases and processes ------------------------------------------------------------------


def _admin() -> Any:
    import psycopg

    return psycopg.connect(ADMIN_URL, autocommit=True, connect_timeout=5)


def _db_url(name: str) -> str:
    return urlsplit(ADMIN_URL)._replace(path=f"/{name}").geturl()


@contextlib.contextmanager
def fresh_database(label: str) -> Any:
    name = DB_PREFIX + label
    with _admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _db_url(name)
    finally:
        with _admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def drop_leftovers() -> None:
    """Drop this process's databases that are left; warn (never hide an error) if it cannot."""
    try:
        with _admin() as admin:
            for (name,) in admin.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE %s",
                (DB_PREFIX.replace("_", r"\_") + "%",),
            ).fetchall():
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    except Exception as exc:
        print(f"could not drop databases {DB_PREFIX}*: {exc}", file=sys.stderr)


def _kill(procs: list[subprocess.Popen[Any]]) -> None:
    """Kill the process group of every process still alive, and reap them all."""
    for proc in procs:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)


def _tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def _interrupt() -> None:
    raise KeyboardInterrupt


# -- main -------------------------------------------------------------------------------------


def main(runs: int, workers: list[int], concurrency: int, rounds: int) -> list[dict[str, Any]]:
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-workers-"))
    (folder / "bench_template.py").write_text(TEMPLATE)
    rows = []
    try:
        for k in workers:
            ours: list[dict[str, float]] = []
            raw: list[dict[str, float]] = []
            for r in range(rounds):
                # Alternate which side goes first, so neither always meets a warmer server.
                sides = [("sl", ours, measure_stageline), ("raw", raw, measure_raw)]
                for label, into, measure in sides if r % 2 == 0 else sides[::-1]:
                    with fresh_database(f"{label}{k}_{r}") as url:
                        into.append(measure(url, runs, k, concurrency, folder))
            # Ratios are medians of per-round ratios (as in bench_runner.py): the two sides of a
            # round run back to back, so a busy moment on the machine skews one ratio only.
            rows.append(
                {
                    "workers": k,
                    "stageline": statistics.median(runs / m["wall"] for m in ours),
                    "raw": statistics.median(runs / m["wall"] for m in raw),
                    "ratio": statistics.median(
                        r["wall"] / o["wall"] for o, r in zip(ours, raw, strict=True)
                    ),
                    "stageline_busy": statistics.median(runs / m["busy"] for m in ours),
                    "raw_busy": statistics.median(runs / m["busy"] for m in raw),
                    "ratio_busy": statistics.median(
                        r["busy"] / o["busy"] for o, r in zip(ours, raw, strict=True)
                    ),
                }
            )
    except BaseException:
        print(f"the processes' logs are in {folder}", file=sys.stderr)
        raise
    else:
        shutil.rmtree(folder, ignore_errors=True)
    finally:
        drop_leftovers()
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--raw-child":
        _, _, child_url, prefix, count, conc = sys.argv
        report = asyncio.run(raw_child(child_url, prefix, int(count), int(conc)))
        print(json.dumps(report), flush=True)
        sys.exit(0)
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="runs per measurement (N)")
    parser.add_argument(
        "--workers", default="1,2,4", help="numbers of processes to measure, comma-separated (K)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=2, help="runs each process advances at once (C)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="measurements per side and K; the figures are medians"
    )
    args = parser.parse_args()
    # Ctrl-C and SIGTERM unwind through the finally blocks that kill the processes and drop the
    # databases. A handler of our own also keeps asyncio.run from turning Ctrl-C into a
    # cancellation, which code under it may absorb.
    signal.signal(signal.SIGINT, lambda signum, frame: _interrupt())
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    ks = [int(k) for k in args.workers.split(",") if k.strip()]
    result = main(args.runs, ks, args.concurrency, args.rounds)
    print(
        f"{NODES}-node no-op graph, Postgres, durability=sync, {args.runs} runs, "
        f"{args.concurrency} at a time per process, {args.rounds} round(s); "
        f"{os.cpu_count()} CPUs"
    )
    print("runs/s from the first process's start (busy: first node to last run's end)")
    print(
        f"  {'workers':>7}  {'stageline':>10}  {'raw':>10}  {'ratio':>6}    "
        f"{'busy: stageline':>15}  {'raw':>8}  {'ratio':>6}"
    )
    for row in result:
        print(
            f"  {row['workers']:>7}  {row['stageline']:>10.1f}  {row['raw']:>10.1f}  "
            f"{row['ratio']:>5.2f}x    {row['stageline_busy']:>15.1f}  "
            f"{row['raw_busy']:>8.1f}  {row['ratio_busy']:>5.2f}x"
        )
    print(
        "ratio: stageline runs/s / raw runs/s, median of per-round ratios "
        "(1.00x: as fast as raw LangGraph)"
    )
