"""``stageline db``: apply migrations, copy a ledger to another database; and ``--ephemeral``."""

from __future__ import annotations

import os
from typing import Annotated

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.errors import UsageError
from stageline.ledger import mask_url

__all__ = ["db_app", "use_memory"]

db_app = typer.Typer(
    name="db",
    help="The database: apply its migrations, or copy everything to another one.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

EPHEMERAL_URL = "memory://"


@db_app.command()
def upgrade() -> None:
    """Apply pending migrations to the configured database and print its schema version.

    A database made by a release before stageline's own checkpoint store has its checkpoints
    converted (from LangGraph's tables) in place.

    On Postgres, the job queue's tables (procrastinate's schema) are set up too, so workers
    started later find them ready.
    """
    from stageline.ledger import upgrade_database
    from stageline.worker import ensure_queue_schema, is_postgres

    url = load_settings().database_url
    report = run_async(upgrade_database(url))
    done = (
        f"applied migration(s) {', '.join(map(str, report.applied))}"
        if report.applied
        else "already up to date"
    )
    typer.echo(f"{mask_url(url)}: schema version {report.version} ({done})")
    if report.converted:
        typer.echo(
            f"{mask_url(url)}: converted {report.converted} checkpoint(s) from LangGraph's "
            "tables to stageline's"
        )
    if is_postgres(url) and run_async(ensure_queue_schema(url)):
        typer.echo(f"{mask_url(url)}: created the job queue's tables (procrastinate)")


@db_app.command()
def copy(
    to_url: Annotated[
        str, typer.Option("--to", metavar="URL", help="The database to copy into (set up first).")
    ],
    from_url: Annotated[
        str | None,
        typer.Option(
            "--from",
            metavar="URL",
            help="The database to copy from (default: the "
            "configured one, database_url or STAGELINE_DATABASE_URL).",
        ),
    ] = None,
) -> None:
    """Copy runs, node records, events and checkpoints to another database.

    Use it to move from the SQLite file to Postgres; then point database_url at the new
    database. Rows the target has already are kept, so copying again is safe.
    """
    from stageline.ledger import copy_database

    source = from_url or load_settings().database_url
    typer.echo(f"copying {mask_url(source)} -> {mask_url(to_url)}")
    report = run_async(copy_database(source, to_url, progress=lambda line: typer.echo(f"  {line}")))
    runs = report.tables.get("stageline_runs", 0)
    typer.echo(
        f"copied {runs} run(s) and {report.checkpoints} checkpoint(s); to use the copy, "
        f"set database_url (or STAGELINE_DATABASE_URL) to {mask_url(to_url)}"
    )


def use_memory(*, detach: bool) -> None:
    """Make this process keep its runs in memory, on purpose, and say so on stderr."""
    if detach:
        raise UsageError(
            "--ephemeral keeps the run in this process's memory, so it cannot go to the "
            "background; drop --detach"
        )
    typer.echo(
        "warning: --ephemeral: this run is kept in memory only; its ledger and checkpoints "
        "are gone when this command exits (nothing to show, approve, resume or retry later)",
        err=True,
    )
    os.environ["STAGELINE_DATABASE_URL"] = EPHEMERAL_URL  # read by Runner.open in this process
