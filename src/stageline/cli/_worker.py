"""``stageline worker`` and ``stageline prune``: thin commands over the worker and the runner."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._render import console, print_json
from stageline.errors import UsageError
from stageline.ledger import RunStatus
from stageline.runner import PRUNED_BY_DEFAULT, PruneReport

__all__ = ["COMMANDS", "prune", "worker"]

RETENTION_DEFAULT = "30d"


def _retention(value: str) -> float | None:
    from stageline.stages import parse_duration

    if value.strip().lower() in ("off", "0", "none", "never"):
        return None
    return parse_duration(value, "--retention")


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(
            "--concurrency",
            "-c",
            min=1,
            metavar="N",
            help="Runs this worker advances at once (default: 1; 2 with --local).",
        ),
    ] = None,
    local: Annotated[
        bool,
        typer.Option(
            "--local",
            help="The one local worker of a SQLite project: "
            "advances its queued runs, --concurrency at a time.",
        ),
    ] = False,
    idle_exit: Annotated[
        float | None,
        typer.Option(
            "--idle-exit",
            metavar="SECONDS",
            help="With --local: exit after this long without work.",
        ),
    ] = None,
    retention: Annotated[
        str,
        typer.Option(
            "--retention",
            metavar="DURATION",
            envvar="STAGELINE_RETENTION",
            help="Prune finished runs idle longer than this, hourly (e.g. 30d; off: never).",
        ),
    ] = RETENTION_DEFAULT,
) -> None:
    """Advance queued runs in the background until SIGTERM, which drains: runs in flight stop
    after their current step and are queued again for another worker."""
    # A SIGTERM while the worker starts (its imports take a while) stops it as cleanly as one
    # later: noted here, before them, and honoured once the worker's own handler is in place.
    early: list[int] = []
    previous = None
    if not local and threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda sig, _frame: early.append(sig))
    try:
        _work(concurrency, local, idle_exit, retention, stopped_early=lambda: bool(early))
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _work(
    concurrency: int | None,
    local: bool,
    idle_exit: float | None,
    retention: str,
    *,
    stopped_early: Callable[[], bool],
) -> None:
    from stageline.worker import run_local_worker, run_worker

    keep = _retention(retention)
    if local:
        from stageline.worker._local import DEFAULT_CONCURRENCY

        started = run_async(
            run_local_worker(
                idle_exit=idle_exit, retention=keep, concurrency=concurrency or DEFAULT_CONCURRENCY
            )
        )
        if not started:
            typer.echo("a local worker already runs for this project", err=True)
        return
    if idle_exit is not None:
        raise UsageError("--idle-exit goes with --local")
    run_async(run_worker(concurrency=concurrency or 1, retention=keep, stopped_early=stopped_early))


def prune(
    older_than: Annotated[
        str,
        typer.Option(
            "--older-than",
            metavar="DURATION",
            help="Delete runs not updated for this long, e.g. 30d, 12h.",
        ),
    ],
    status: Annotated[
        str,
        typer.Option(
            "--status",
            metavar="STATUS,...",
            help="Only runs with these statuses (default: " + ",".join(PRUNED_BY_DEFAULT) + ").",
        ),
    ] = ",".join(PRUNED_BY_DEFAULT),
    vacuum: Annotated[
        bool,
        typer.Option(
            "--vacuum",
            help="Then give the space back: SQLite's file shrinks (VACUUM); on Postgres a plain "
            "VACUUM of the ledger's tables (the space is reused, the files keep their size).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Delete old runs' checkpoints and ledger rows; their outcomes (for `stats`) are kept."""
    from stageline.stages import parse_duration

    seconds = parse_duration(older_than, "--older-than")
    try:
        statuses = [RunStatus(s.strip()) for s in status.split(",") if s.strip()]
    except ValueError as exc:
        raise UsageError(f"--status: {exc}; use any of {', '.join(RunStatus)}") from exc
    report = run_async(_prune(seconds, statuses, vacuum))
    reclaimed = report.reclaimed
    if as_json:
        out: dict[str, Any] = {"cutoff": report.cutoff, "pruned": report.run_ids}
        if reclaimed is not None:
            out["size_before"], out["size_after"] = reclaimed.before, reclaimed.after
        print_json(out)
        return
    since = time.strftime("%Y-%m-%d %H:%M", time.localtime(report.cutoff))
    console().print(f"pruned {len(report.run_ids)} run(s) not updated since {since}")
    if reclaimed is not None:
        console().print(
            f"vacuumed: the database was {_mb(reclaimed.before)}, is {_mb(reclaimed.after)}"
        )
    elif vacuum:
        console().print("nothing to vacuum: this database gives no space back")


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


async def _prune(seconds: float, statuses: list[RunStatus], vacuum: bool) -> PruneReport:
    from stageline.runner import Runner

    async with Runner.open(load_settings(), deliver=False) as runner:
        return await runner.prune(older_than=seconds, statuses=statuses, vacuum=vacuum)


COMMANDS = (worker, prune)
