"""LangGraph SDK round trips per second: ``stageline serve`` (SQLite, Postgres) against
LangGraph's own dev server, at 1, 8 and 32 concurrent SDK clients (issue #25).

Run: ``python benchmarks/bench_api.py [--seconds S] [--rounds R] [--concurrency 1,8,32]
[--servers sqlite,postgres,langgraph] [--workers 1,2]``.

One round trip is what an Agent Inbox client does with a thread: ``threads.create``, then
``runs.wait`` with input (the graph runs to its ``interrupt()``), then ``runs.wait`` with
``command={"resume": ...}`` (it runs to its end); three HTTP requests, through
``langgraph_sdk``'s async client, each client its own connection pool. The graph
(``bench``: a node, a node that calls ``interrupt()``, a node) is written to a temporary
project with a ``langgraph.json``, which both servers serve as it is:

- ``stageline serve`` (real subprocesses, ``--workers N`` processes each; a server for each N
  given) over a SQLite file and over a fresh Postgres database
  (``stageline_bench_api_<pid>_<N>`` on the server at ``STAGELINE_TEST_POSTGRES``, default
  ``postgresql://postgres@127.0.0.1:5432/test``; dropped at the end, even after an error or
  Ctrl-C), with a token made by ``stageline token create``;
- ``langgraph dev --no-reload`` (in memory): ``STAGELINE_TEST_LANGGRAPH_CLI``, or
  ``.venv-langgraph/bin/langgraph`` beside this repository (``.ci/run`` makes it).

For each round, concurrency and server (servers interleaved, their order rotated each round, so
that a busy moment of the shared machine falls on each in turn), C clients loop on round trips
for S seconds; the clock stops when the last one started has ended. Printed per server and
concurrency: round trips per second and the latency of one round trip (p50, p99), the medians
over rounds, and stageline's throughput over LangGraph's (median of per-round ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from langgraph_sdk import get_client

ADMIN_URL = os.environ.get("STAGELINE_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")
DB_NAME = f"stageline_bench_api_{os.getpid()}"
ROOT = Path(__file__).resolve().parents[1]
START_TIMEOUT = 180.0

GRAPH = textwrap.dedent('''\
    """bench: a node, a node that interrupts, a node."""

    from typing import TypedDict

    from langgraph.graph import START, StateGraph
    from langgraph.types import interrupt


    class State(TypedDict, total=False):
        n: int
        answer: str


    def first(state: State) -> dict:
        return {"n": state.get("n", 0) + 1}


    def ask(state: State) -> dict:
        return {"answer": interrupt({"question": "go on?", "n": state["n"]})}


    def last(state: State) -> dict:
        return {"n": state["n"] + 1}


    builder = StateGraph(State)
    builder.add_node("first", first)
    builder.add_node("ask", ask)
    builder.add_node("last", last)
    builder.add_edge(START, "first")
    builder.add_edge("first", "ask")
    builder.add_edge("ask", "last")
    graph = builder.compile()
    ''')
LANGGRAPH_JSON = '{"dependencies": ["."], "graphs": {"bench": "./graphs/bench.py:graph"}}\n'


@dataclass
class Served:
    """A server subprocess the benchmark drives."""

    name: str
    url: str
    api_key: str | None
    proc: subprocess.Popen[bytes]
    log: Path
    rates: dict[int, list[float]] = field(default_factory=dict)
    p50: dict[int, list[float]] = field(default_factory=dict)
    p99: dict[int, list[float]] = field(default_factory=dict)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def make_project(folder: Path) -> None:
    (folder / "graphs").mkdir(parents=True)
    (folder / "graphs" / "bench.py").write_text(GRAPH)
    (folder / "langgraph.json").write_text(LANGGRAPH_JSON)


def wait_answering(served: Served) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if served.proc.poll() is not None:
            raise SystemExit(f"{served.name} exited {served.proc.returncode}:\n{tail(served.log)}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{served.url}/ok", timeout=2).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"{served.name} did not answer in {START_TIMEOUT}s:\n{tail(served.log)}")


def tail(path: Path, lines: int = 30) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def start_stageline(
    name: str, folder: Path, database_url: str, workers: int, launcher: list[str] | None = None
) -> Served:
    """``stageline serve`` on the bench project; ``launcher`` runs the CLI instead of
    ``python -m stageline.cli`` (``bench_api_counts.py`` counts the server's SQL so)."""
    make_project(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STAGELINE_")}
    env.update(
        STAGELINE_HOME=str(folder / ".stageline"),
        STAGELINE_DATABASE_URL=database_url,
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])]),
    )
    cli = [sys.executable, "-m", "stageline.cli"]
    made = subprocess.run(
        [*cli, "token", "create", "bench", "--scope", "admin"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    port = free_port()
    log = folder / "serve.log"
    command = [*(launcher or cli), "serve", "--port", str(port), "--log-level", "warning"]
    if workers != 1:
        command += ["--workers", str(workers)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            command,
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    key = made.stdout.strip().splitlines()[-1]
    return Served(name, f"http://127.0.0.1:{port}", key, proc, log)


def langgraph_cli() -> str | None:
    named = os.environ.get("STAGELINE_TEST_LANGGRAPH_CLI")
    beside = ROOT / ".venv-langgraph" / "bin" / "langgraph"
    return named or (str(beside) if beside.exists() else None)


def start_langgraph(folder: Path, command: str) -> Served:
    make_project(folder)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGSMITH", "LANGCHAIN"))}
    env.update({"LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false"})
    for own in ("PYTHONPATH", "VIRTUAL_ENV"):  # its venv's interpreter, not this one's path
        env.pop(own, None)
    port = free_port()
    log = folder / "dev.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [command, "dev", "--no-browser", "--no-reload", "--port", str(port)],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Served("langgraph dev", f"http://127.0.0.1:{port}", None, proc, log)


# -- the load ---------------------------------------------------------------------------------


async def round_trip(client: Any) -> None:
    thread = await client.threads.create()
    tid = thread["thread_id"]
    out = await client.runs.wait(tid, "bench", input={"n": 0})
    interrupts = out.get("__interrupt__") if isinstance(out, dict) else None
    if not interrupts:
        raise RuntimeError(f"the run did not stop at its interrupt: {out!r}")
    out = await client.runs.wait(tid, "bench", command={"resume": "yes"})
    if not (isinstance(out, dict) and out.get("n") == 2 and out.get("answer") == "yes"):
        raise RuntimeError(f"the resumed run did not end as it should: {out!r}")


async def measure(served: Served, concurrency: int, seconds: float) -> tuple[float, list[float]]:
    """C clients loop on round trips for ``seconds``: (round trips/s, latencies in s)."""
    clients = [get_client(url=served.url, api_key=served.api_key) for _ in range(concurrency)]
    latencies: list[float] = []
    try:
        began = time.perf_counter()
        stop = began + seconds

        async def loop(client: Any) -> None:
            while time.perf_counter() < stop:
                started = time.perf_counter()
                await round_trip(client)
                latencies.append(time.perf_counter() - started)

        await asyncio.gather(*(loop(c) for c in clients))
        elapsed = time.perf_counter() - began
    finally:
        for client in clients:
            await client.aclose()
    return len(latencies) / elapsed, latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench(servers: list[Served], levels: list[int], seconds: float, rounds: int) -> None:
    for served in servers:  # warm up: graph loaded, first queries, connections
        for client in [get_client(url=served.url, api_key=served.api_key)]:
            try:
                for _ in range(2):
                    await round_trip(client)
            finally:
                await client.aclose()
    for r in range(rounds):
        for c in levels:
            turn = r % len(servers)
            for served in servers[turn:] + servers[:turn]:
                rate, lat = await measure(served, c, seconds)
                served.rates.setdefault(c, []).append(rate)
                served.p50.setdefault(c, []).append(percentile(lat, 0.5) * 1000)
                served.p99.setdefault(c, []).append(percentile(lat, 0.99) * 1000)
                print(
                    f"  round {r + 1} c={c:<3} {served.name:<20} {rate:6.1f} /s  "
                    f"p50 {percentile(lat, 0.5) * 1000:6.0f} ms  "
                    f"p99 {percentile(lat, 0.99) * 1000:6.0f} ms  ({len(lat)} trips)",
                    flush=True,
                )


def report(servers: list[Served], levels: list[int]) -> None:
    ref = next((s for s in servers if s.name == "langgraph dev"), None)
    print("\nround trips/s (p50 / p99 ms of one round trip), medians over rounds")
    print(f"  {'server':<20}" + "".join(f"{'c=' + str(c):>26}" for c in levels))
    for served in servers:
        cells = [
            f"{statistics.median(served.rates[c]):6.1f} ({statistics.median(served.p50[c]):5.0f}"
            f" / {statistics.median(served.p99[c]):5.0f})"
            for c in levels
        ]
        print(f"  {served.name:<20}" + "".join(f"{cell:>26}" for cell in cells))
    if ref is None:
        return
    for served in servers:
        if served is ref:
            continue
        ratios = [
            statistics.median(a / b for a, b in zip(served.rates[c], ref.rates[c], strict=True))
            for c in levels
        ]
        print(
            f"  {served.name + ' / langgraph':<20}" + "".join(f"{f'{x:.2f}x':>26}" for x in ratios)
        )


# -- databases and processes ------------------------------------------------------------------


def _admin(url: str = ADMIN_URL) -> Any:
    import psycopg

    return psycopg.connect(url, autocommit=True, connect_timeout=5)


@contextlib.contextmanager
def fresh_database(suffix: str, admin_url: str = ADMIN_URL) -> Iterator[str]:
    """A new database on ``admin_url``'s server (its URL), dropped afterwards."""
    name = f"{DB_NAME}_{suffix}"
    with _admin(admin_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(admin_url)._replace(path=f"/{name}").geturl()
    finally:
        try:
            with _admin(admin_url) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except Exception as exc:
            print(f"could not drop database {name}: {exc}", file=sys.stderr)


def stop(served: Served) -> None:
    if served.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(served.proc.pid, signal.SIGTERM)
        try:
            served.proc.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(served.proc.pid, signal.SIGKILL)
            served.proc.wait(30)


def load() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def main(args: argparse.Namespace) -> None:
    wanted = [s.strip() for s in args.servers.split(",") if s.strip()]
    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    counts = [int(n) for n in args.workers.split(",") if n.strip()]
    folder = Path(tempfile.mkdtemp(prefix="stageline-bench-api-"))
    servers: list[Served] = []
    failed = True
    try:
        with contextlib.ExitStack() as stack:
            for name in wanted:
                if name == "langgraph":
                    command = langgraph_cli()
                    if command is None:
                        raise SystemExit(
                            "LangGraph's dev server is not installed: set "
                            "STAGELINE_TEST_LANGGRAPH_CLI (see tests/acceptance/"
                            "test_langgraph_compat.py), or leave langgraph out of --servers"
                        )
                    servers.append(start_langgraph(folder / "langgraph", command))
                    continue
                if name not in ("sqlite", "postgres"):
                    raise SystemExit(f"unknown server {name!r}: sqlite, postgres or langgraph")
                for n in counts:
                    label = f"stageline {name}" + (f" w{n}" if counts != [1] else "")
                    where = folder / f"{name}{n}"
                    url = (
                        f"sqlite:///{where / '.stageline' / 'stageline.db'}"
                        if name == "sqlite"
                        else stack.enter_context(fresh_database(str(n)))
                    )
                    servers.append(start_stageline(label, where, url, n))
            for served in servers:
                wait_answering(served)
            workers = f", stageline --workers {args.workers}" if counts != [1] else ""
            print(
                f"bench graph (node, interrupt(), node): threads.create + runs.wait + "
                f"runs.wait(resume) per round trip; {args.seconds:g} s per cell, "
                f"{args.rounds} round(s){workers}; {os.cpu_count()} CPUs"
            )
            print(f"load before: {load()}", flush=True)
            asyncio.run(bench(servers, levels, args.seconds, args.rounds))
            print(f"load after:  {load()}")
            report(servers, levels)
            for served in servers:
                stop(served)
            failed = False
    finally:
        for served in servers:
            stop(served)
        if failed:
            print(f"the servers' logs are in {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def _interrupt() -> None:
    raise KeyboardInterrupt


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="load per cell (S)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds; figures are medians")
    parser.add_argument("--concurrency", default="1,8,32", help="clients at once, comma-separated")
    parser.add_argument("--servers", default="sqlite,postgres,langgraph")
    parser.add_argument(
        "--workers", default="1", help="stageline serve --workers N; several: one server each"
    )
    # Ctrl-C and SIGTERM unwind through the finally blocks that stop the servers and drop the
    # database.
    signal.signal(signal.SIGINT, lambda signum, frame: _interrupt())
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    main(parser.parse_args())
