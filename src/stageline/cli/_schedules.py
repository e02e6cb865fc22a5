"""``stageline schedule``: schedules (LangGraph's crons) that start runs of a template; fired
by whichever ``stageline serve`` or ``stageline worker`` runs."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._inputs import parse_inputs
from stageline.cli._launch import input_file_option, inputs_option
from stageline.cli._render import console, print_json, when
from stageline.errors import UsageError
from stageline.ledger import open_ledger

if TYPE_CHECKING:
    from stageline.ledger import Cron

__all__ = ["schedule_app"]

schedule_app = typer.Typer(
    name="schedule",
    help="Schedules that start runs of a template at cron times: add, list, delete.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@schedule_app.command("add")
def add(
    template: Annotated[
        str, typer.Argument(metavar="TEMPLATE", help="A template name or file (.yaml, .py).")
    ],
    cron: Annotated[
        str,
        typer.Argument(
            metavar="CRON",
            help="When: minute hour day-of-month month day-of-week, e.g. '0 9 * * 1-5'.",
        ),
    ],
    inputs: Annotated[list[str] | None, inputs_option("An input of each run")] = None,
    input_file: Annotated[str | None, input_file_option("inputs")] = None,
    timezone: Annotated[
        str | None,
        typer.Option("--timezone", metavar="ZONE", help="Read CRON in this zone (default UTC)."),
    ] = None,
    until: Annotated[
        datetime | None,
        typer.Option("--until", metavar="WHEN", help="No run after this time (ISO 8601)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Add a schedule: a new run of TEMPLATE at each time CRON names (inputs checked now)."""
    values = parse_inputs(inputs or [], input_file)

    async def go() -> Cron:
        from stageline.runner import Runner

        async with Runner.open(deliver=False) as runner:
            return await runner.schedules.add(
                template,
                cron,
                inputs=values,
                timezone=timezone,
                end_time=until.timestamp() if until else None,
                created_by="cli",
            )

    made = run_async(go())
    if as_json:
        print_json(made.to_dict())
        return
    typer.echo(f"added schedule {made.cron_id}: {template} at '{cron}', next {_next(made)}")


def _next(cron: Cron) -> str:
    return when(cron.next_run_at) if cron.next_run_at is not None else "never (over)"


async def _crons() -> list[Cron]:
    async with open_ledger(load_settings().database_url) as ledger:
        return await ledger.crons()


@schedule_app.command("list")
def list_schedules(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """List schedules: id, template, cron, next time, enabled."""
    found = run_async(_crons())
    if as_json:
        print_json([c.to_dict() for c in found])
        return
    if not found:
        console().print("no schedules; add one with `stageline schedule add TEMPLATE CRON`")
        return
    from stageline.cli._tables import Col, fitted

    cols = [
        Col(name="schedule", wrap=True),
        Col(name="template", wrap=True),
        Col(name="cron"),
        Col(name="next", keep=2),
        Col(name="thread", keep=1, under=True),
    ]
    rows: list[list[Any]] = [
        [
            c.cron_id,
            c.template,
            c.schedule + (f" ({c.timezone})" if c.timezone else ""),
            _next(c) if c.enabled else "disabled",
            c.thread_id or "",
        ]
        for c in found
    ]
    console().print(fitted(cols, rows))


@schedule_app.command("delete")
def delete(
    cron_id: Annotated[str, typer.Argument(metavar="SCHEDULE", help="A schedule id.")],
) -> None:
    """Delete a schedule; the runs it started stay (and still name it)."""

    async def go() -> bool:
        async with open_ledger(load_settings().database_url) as ledger:
            return await ledger.delete_cron(cron_id)

    if not run_async(go()):
        raise UsageError(f"no schedule {cron_id!r} (see `stageline schedule list`)")
    typer.echo(f"deleted schedule {cron_id}")
