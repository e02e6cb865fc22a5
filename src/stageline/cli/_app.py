"""The ``stageline`` commands: each parses its arguments and calls the runner or the ledger."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer

from stageline.cli._aio import run_async
from stageline.cli._args import RunArg
from stageline.cli._codes import ADVANCE_EPILOG, EPILOG
from stageline.cli._compose import compose
from stageline.cli._config import load_settings
from stageline.cli._db import db_app, use_memory
from stageline.cli._foreground import advance_in_foreground
from stageline.cli._github import github_app
from stageline.cli._harness import transcript
from stageline.cli._history import fork, history, lineage_lines
from stageline.cli._human import ADVANCING
from stageline.cli._human import COMMANDS as HUMAN_COMMANDS
from stageline.cli._inputs import parse_deadlines, parse_inputs
from stageline.cli._launch import (
    RunIdOpt,
    chosen_run_id,
    detach_option,
    input_file_option,
    inputs_option,
    launch,
)
from stageline.cli._render import (
    console,
    event_line,
    print_json,
    print_json_line,
    records_table,
    run_header,
    runs_table,
    templates_table,
)
from stageline.cli._render_waits import decisions_table, qa_lines, waiting_lines
from stageline.cli._respond import respond
from stageline.cli._schedules import schedule_app
from stageline.cli._serve import serve
from stageline.cli._stages import stages
from stageline.cli._stats import stats
from stageline.cli._tokens import token_app
from stageline.cli._worker import COMMANDS as WORKER_COMMANDS
from stageline.ledger import EventCategory, Run, RunStatus, WaitKind, open_ledger

if TYPE_CHECKING:
    from rich.console import Console

    from stageline.runner import Runner, RunSummary

__all__ = ["HELP_OPTIONS", "app"]

FOLLOW_POLL = 0.5
"""Seconds between two looks at the ledger while following a live run."""

QUEUED_HINT_AFTER = 10.0
"""Seconds a followed run may stay queued before we say how to advance it."""

_LIVE = (RunStatus.QUEUED, RunStatus.RUNNING)

HELP_OPTIONS = ("-h", "--help")

app = typer.Typer(
    name="stageline",
    help="Durable pipelines for LLM agents, on LangGraph, with a run ledger.",
    epilog=EPILOG,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": list(HELP_OPTIONS), "max_content_width": 100},
)

JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON only.")]
ForceFlag = Annotated[
    bool, typer.Option("--force", help="Continue even though the template changed since.")
]


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"stageline {version('stageline')}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    """Durable pipelines for LLM agents, on LangGraph, with a run ledger."""


# -- templates -------------------------------------------------------------------------------


@app.command()
def templates(as_json: JsonFlag = False) -> None:
    """List the templates found by name: built-ins, entry points, the templates folder."""
    from stageline.templates import list_templates

    infos = list_templates(load_settings().template_dirs)
    if as_json:
        print_json([asdict(info) for info in infos])
    else:
        console().print(templates_table(infos))


@app.command()
def graph(
    template: Annotated[str, typer.Argument(metavar="TEMPLATE", help="A template name or file.")],
) -> None:
    """Print a template's graph as Mermaid text."""
    from stageline.templates import load_template, use_project

    settings = load_settings()
    use_project(settings)
    made = load_template(template, settings.template_dirs)
    typer.echo(made.mermaid().rstrip("\n"))


# -- advancing runs --------------------------------------------------------------------------


def _advance(run_id: str, action: Callable[[Runner], Awaitable[RunSummary]]) -> None:
    """Advance one run in the foreground with live progress; exit with its outcome."""
    advance_in_foreground(run_id, action)


@app.command(epilog=ADVANCE_EPILOG)
def run(
    template: Annotated[
        str, typer.Argument(metavar="TEMPLATE", help="A template name or file (.yaml, .py).")
    ],
    inputs: Annotated[list[str] | None, inputs_option("An input")] = None,
    input_file: Annotated[str | None, input_file_option("inputs")] = None,
    run_id: RunIdOpt = None,
    detach: Annotated[bool, detach_option("the run")] = False,
    deadline: Annotated[
        list[str] | None,
        typer.Option(
            "--deadline",
            metavar="NODE=DURATION",
            help="This run's deadline for a gate or question node, e.g. review=2h. Repeatable.",
        ),
    ] = None,
    ephemeral: Annotated[
        bool,
        typer.Option(
            "--ephemeral",
            envvar="STAGELINE_EPHEMERAL",
            help="Keep the run in memory only, on purpose: nothing of it survives.",
        ),
    ] = False,
    budget_tokens: Annotated[
        float | None,
        typer.Option(
            "--budget-tokens",
            metavar="N",
            help="This run's token budget; past it the run waits at a budget gate.",
        ),
    ] = None,
    budget_cost: Annotated[
        float | None,
        typer.Option(
            "--budget-cost",
            metavar="X",
            help="This run's cost budget; past it the run waits at a budget gate.",
        ),
    ] = None,
    apply: Annotated[
        bool,
        typer.Option(
            "--apply",
            help="Operation templates: bring the result into the "
            "checkout at once instead of waiting at the apply gate.",
        ),
    ] = False,
) -> None:
    """Start a run of TEMPLATE and follow it to its end (or queue it with --detach).

    A run that reaches a gate or a question waits for a person and exits 3, saying how to
    decide (`stageline approve`, `reject`, `changes`, `answer`).
    """
    values = parse_inputs(inputs or (), input_file)
    if apply:
        values["apply"] = True
    deadlines = parse_deadlines(deadline or ())
    rid = chosen_run_id(run_id)
    budget = {k: v for k, v in (("tokens", budget_tokens), ("cost", budget_cost)) if v} or None
    if ephemeral:
        use_memory(detach=detach)
    launch(
        rid,
        lambda runner: runner.start(
            template, values, run_id=rid, deadlines=deadlines, budget=budget
        ),
        lambda runner: runner.create(
            template, values, run_id=rid, deadlines=deadlines, budget=budget
        ),
        detach=detach,
    )


FreshFlag = Annotated[
    bool,
    typer.Option(
        "--fresh", help="Start agents afresh instead of continuing their recorded session."
    ),
]


def _agent_services(fresh: bool) -> dict[str, object]:
    from stageline.operations import SERVICE_FRESH

    return {SERVICE_FRESH: True} if fresh else {}


@app.command(epilog=ADVANCE_EPILOG)
def resume(run_id: RunArg, force: ForceFlag = False, fresh: FreshFlag = False) -> None:
    """Continue a run from its last checkpoint (a stopped or queued run, or one whose process
    died); an agent that was interrupted continues its own session unless --fresh."""
    _advance(
        run_id, lambda runner: runner.resume(run_id, force=force, services=_agent_services(fresh))
    )


@app.command(epilog=ADVANCE_EPILOG)
def retry(run_id: RunArg, force: ForceFlag = False, fresh: FreshFlag = False) -> None:
    """Re-run a failed run from its failed node, as the next attempt; an agent that failed
    continues its own session (claude --resume, codex exec resume) unless --fresh."""
    _advance(
        run_id, lambda runner: runner.retry(run_id, force=force, services=_agent_services(fresh))
    )


@app.command()
def cancel(run_id: RunArg) -> None:
    """Cancel a run: at once, or, if a live process advances it, after its current step."""
    run_async(_cancel(run_id))


async def _cancel(run_id: str) -> None:
    from stageline.runner import Runner

    async with Runner.open() as runner:
        done = await runner.cancel(run_id)
    if done.status is RunStatus.CANCELLED:
        console().print(f"cancelled run {run_id}")
    else:
        holder = f" ({done.lease_holder})" if done.lease_holder else ""
        console().print(
            f"cancel requested: the process advancing run {run_id}{holder} "
            "stops it after its current step"
        )


# -- reading the ledger ----------------------------------------------------------------------


@app.command()
def runs(
    status: Annotated[
        RunStatus | None,
        typer.Option(
            "--status",
            metavar="STATUS",
            help="Only runs with this status: " + ", ".join(RunStatus) + ".",
        ),
    ] = None,
    template: Annotated[
        str | None,
        typer.Option("--template", metavar="TEMPLATE", help="Only runs of this template."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, metavar="N", help="At most this many runs.")
    ] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List runs, newest first. A run's duration runs from its creation to its end, or to
    where it stopped (waiting, failed): what the command that advanced it printed last."""
    from stageline.ledger import read_runs

    url = load_settings().database_url
    wanted = str(status) if status else None
    # A current SQLite file is read with sqlite3 alone: no SQLAlchemy, no asyncio (issue 28).
    found = read_runs(url, status=wanted, template=template, limit=limit)
    if found is None:  # only the store can answer (Postgres, a new or older file, an error)
        found = run_async(_list_runs(url, wanted, template, limit))
    if as_json:
        print_json([r.to_dict() for r in found])
    elif not found:
        console().print("no runs yet; start one with `stageline run TEMPLATE`")
    else:
        console().print(runs_table(found))


async def _list_runs(url: str, status: str | None, template: str | None, limit: int) -> list[Run]:
    async with open_ledger(url) as ledger:
        return await ledger.list_runs(status=status, template=template, limit=limit)


@app.command()
def show(run_id: RunArg, as_json: JsonFlag = False) -> None:
    """Show a run: its header, one record per node attempt, its decisions and questions."""
    run_async(_show(run_id, as_json))


async def _show(run_id: str, as_json: bool) -> None:
    from stageline.runner._show import quick_status

    settings = load_settings()
    async with open_ledger(settings.database_url) as ledger:
        summary = await quick_status(ledger, run_id, settings.home)
        # node.* events say how long each run of a node's code took: its work, apart from
        # the time it waited for a person (``show`` prints both).
        ends = [] if as_json else await ledger.events(run_id, categories=["lifecycle", "error"])
    if summary is None:  # only LangGraph can read this checkpoint (or say what is wrong)
        from stageline.runner import Runner

        async with Runner.open(deliver=False) as runner:
            summary = await runner.status(run_id)
    if as_json:
        print_json(summary.to_dict())
        return
    out = console()
    out.print(run_header(summary.run))
    for lineage in lineage_lines(summary):
        out.print(lineage)
    out.print()
    if summary.records:
        from stageline.cli._timing import node_times

        out.print(records_table(summary.records, times=node_times(summary.records, ends)))
    else:
        out.print("no node has run yet")
    outputs = {k: v for k, v in summary.state.items() if k.endswith("_path") and v}
    for key, value in outputs.items():
        out.print(f"{key}: {value}")
    gates = [w for w in summary.waits if w.kind is WaitKind.GATE]
    if gates:
        out.print()
        out.print("decisions")
        out.print(decisions_table(gates))
    questions = [w for w in summary.waits if w.kind is not WaitKind.GATE]
    if questions:
        out.print()
        out.print(
            "questions and answers"
            + (", CI" if any(w.kind is WaitKind.CI for w in questions) else "")
        )
        for line in qa_lines(questions):
            out.print(line)
    for line in waiting_lines(run_id, summary.waiting):
        out.print(line)
    if summary.checkpoint_error:
        out.print()
        out.print(f"checkpoint: cannot be read: {summary.checkpoint_error}")


@app.command()
def logs(
    run_id: RunArg,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing until the run stops.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON only: an array (JSON lines with --follow).")
    ] = False,
    kind: Annotated[
        list[EventCategory] | None,
        typer.Option(
            "--kind",
            metavar="KIND",
            help="Only events of this category: lifecycle, log, tool, output or error. Repeatable.",
        ),
    ] = None,
) -> None:
    """Print a run's events in order."""
    run_async(_logs(run_id, follow, as_json, [str(k) for k in kind or ()]))


async def _logs(run_id: str, follow: bool, as_json: bool, kinds: list[str]) -> None:
    import asyncio

    out: Console | None = None  # made for the first line printed: JSON needs no rich
    collected: list[dict[str, object]] = []
    after = 0
    began = time.monotonic()
    hinted = False
    settings = load_settings()
    from stageline.cli._timing import WaitClock

    clock = WaitClock()
    async with open_ledger(settings.database_url) as ledger:
        while True:
            # The status is read before the events, so none written before it ended is missed.
            current = await ledger.get_run(run_id)
            batch = await ledger.events(run_id, after=after, categories=kinds or None)
            for event in batch:
                after = max(after, event.seq)
                if as_json and follow:
                    print_json_line(event.to_dict())
                elif as_json:
                    collected.append(event.to_dict())
                else:
                    out = out or console()
                    out.print(event_line(event, clock.waited(event)))
            if not follow or current.status not in _LIVE:
                break
            if (
                current.status is RunStatus.QUEUED
                and not hinted
                and time.monotonic() - began > QUEUED_HINT_AFTER
            ):
                hinted = True
                log = settings.run_dir(run_id) / "worker.log"
                typer.echo(
                    f"run {run_id} is still queued; advance it with `stageline resume "
                    f"{run_id}` (a detached worker writes to {log})",
                    err=True,
                )
            await asyncio.sleep(FOLLOW_POLL)
    if as_json and not follow:
        print_json(collected)


app.command()(transcript)

for _human in HUMAN_COMMANDS:  # pending, approve, reject, takeover, changes, answer, sweep, effect
    app.command(epilog=ADVANCE_EPILOG if _human in ADVANCING else None)(_human)
app.command(epilog=ADVANCE_EPILOG)(respond)

app.command()(stats)
app.command()(stages)
app.command()(compose)
app.command()(history)
app.command()(fork)
app.add_typer(db_app, name="db")
for _working in WORKER_COMMANDS:  # worker, prune
    app.command()(_working)
app.command()(serve)
app.add_typer(token_app, name="token")
app.add_typer(schedule_app, name="schedule")
app.add_typer(github_app, name="github")
