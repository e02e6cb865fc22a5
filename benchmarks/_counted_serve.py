"""``stageline serve`` with the SQL it sends counted, for ``bench_api_counts.py``.

Run: ``python benchmarks/_counted_serve.py COUNTS_FILE [--profile PSTATS] [--log-sql LOG]
-- serve ...``.
Before it hands over to the CLI it wraps ``sqlite3.connect`` (each connection gets a
``set_trace_callback`` that counts its statements and COMMITs: every statement SQLite runs,
BEGIN and COMMIT included) and psycopg's ``AsyncCursor.execute`` / ``executemany`` (the
statements stageline sends to Postgres; its transactions are read from ``pg_stat_database`` by
the harness). The product is not changed: this is the benchmark's instrument.

On each SIGUSR1 it writes ``{"seq", "statements", "commits"}`` to COUNTS_FILE; with
``--profile``, the first SIGUSR1 starts cProfile on the event loop's thread and the second
writes its statistics to PSTATS; with ``--log-sql``, each SIGUSR1 appends the statements
sent since the previous one to LOG (one a line, then ``-- report N``).
"""

from __future__ import annotations

import cProfile
import itertools
import json
import signal
import sqlite3
import sys
import threading
from pathlib import Path
from typing import Any

_counts = {"statements": 0, "commits": 0}
_lock = threading.Lock()  # SQLite traces on the loop's thread and on the commit thread
_seq = itertools.count(1)
_profile: dict[str, Any] = {}
_log: list[str] | None = None  # --log-sql: the statements since the last SIGUSR1


def _count(statements: int, commits: int = 0) -> None:
    with _lock:
        _counts["statements"] += statements
        _counts["commits"] += commits


def _trace(sql: str) -> None:
    _count(1, int(sql.lstrip()[:6].upper() == "COMMIT"))
    if _log is not None:
        _log.append(sql)


def _counting_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
    conn = _connect(*args, **kwargs)
    conn.set_trace_callback(_trace)
    return conn


_connect = sqlite3.connect


def _count_psycopg() -> None:
    import psycopg

    execute = psycopg.AsyncCursor.execute
    executemany = psycopg.AsyncCursor.executemany

    async def counted_execute(self: Any, *args: Any, **kwargs: Any) -> Any:
        _count(1)
        if _log is not None:
            _log.append(str(args[0]) if args else "")
        return await execute(self, *args, **kwargs)

    async def counted_executemany(self: Any, query: Any, params_seq: Any, **kwargs: Any) -> Any:
        rows = list(params_seq)  # psycopg sends the statement once per row
        _count(len(rows))
        if _log is not None:
            _log.extend([str(query)] * len(rows))
        return await executemany(self, query, rows, **kwargs)

    psycopg.AsyncCursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.executemany = counted_executemany  # type: ignore[method-assign]


def _report(counts: Path, profile_to: str | None, log_to: str | None) -> None:
    if profile_to is not None:
        profiler = _profile.get("on")
        if profiler is None:
            _profile["on"] = cProfile.Profile()
            _profile["on"].enable()
        else:
            profiler.disable()
            profiler.dump_stats(profile_to)
    with _lock:
        numbers = {"seq": next(_seq), **_counts}
    if log_to is not None and _log is not None:
        with open(log_to, "a") as out:
            out.writelines(f"{' '.join(sql.split())}\n" for sql in _log)
            out.write(f"-- report {numbers['seq']}\n")
        _log.clear()
    part = counts.with_suffix(".part")
    part.write_text(json.dumps(numbers))
    part.replace(counts)


def main(argv: list[str]) -> None:
    split = argv.index("--")
    own, rest = argv[:split], argv[split + 1 :]
    counts = Path(own[0])
    profile_to = own[own.index("--profile") + 1] if "--profile" in own else None
    log_to = own[own.index("--log-sql") + 1] if "--log-sql" in own else None
    if log_to is not None:
        global _log
        _log = []
    sqlite3.connect = _counting_connect  # type: ignore[assignment]
    _count_psycopg()
    signal.signal(signal.SIGUSR1, lambda signum, frame: _report(counts, profile_to, log_to))
    from stageline.cli import main as stageline

    stageline(rest)


if __name__ == "__main__":
    main(sys.argv[1:])
