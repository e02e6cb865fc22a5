"""``history`` (every checkpoint of a run) and ``fork`` (a new run from one of them), and the
lineage lines ``show`` prints."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from stageline.cli._aio import run_async
from stageline.cli._args import RunArg
from stageline.cli._foreground import advance_in_foreground
from stageline.cli._inputs import parse_inputs
from stageline.cli._render import console, print_json, when
from stageline.errors import UsageError
from stageline.names import check_run_id

if TYPE_CHECKING:
    from rich.table import Table

    from stageline.runner import CheckpointInfo, RunSummary

__all__ = ["COMMANDS", "lineage_lines"]


def history(
    run_id: RunArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print JSON only (with each checkpoint's state).")
    ] = False,
) -> None:
    """List every checkpoint of a run: step, the node(s) that wrote it, what runs next, time,
    checkpoint id. `stageline fork RUN --at STEP` starts a new run at one of these steps."""
    run_async(_history(run_id, as_json))


async def _history(run_id: str, as_json: bool) -> None:
    from stageline.runner import Runner

    async with Runner.open(deliver=False) as runner:
        found = await runner.history(run_id)
    if as_json:
        print_json([c.to_dict() for c in found])
    elif not found:
        console().print(f"run {run_id} has no checkpoint yet")
    else:
        console().print(_table(found))


def _table(found: list[CheckpointInfo]) -> Table:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in ("step", "node", "next", "time", "checkpoint"):
        table.add_column(column, no_wrap=column in ("step", "time", "checkpoint"), overflow="fold")
    for c in found:
        node = ", ".join(c.nodes) or ("(input)" if c.source == "input" else f"({c.source})")
        table.add_row(
            str(c.step),
            node,
            ", ".join(c.next) or "-",
            when(c.created_at, "%H:%M:%S"),
            c.checkpoint_id,
        )
    return table


def fork(
    run_id: RunArg,
    at: Annotated[
        int | None,
        typer.Option(
            "--at",
            metavar="STEP",
            help="Run step STEP again, from the checkpoint before it (see `history`).",
        ),
    ] = None,
    checkpoint: Annotated[
        str | None,
        typer.Option("--checkpoint", metavar="ID", help="Start from this checkpoint instead."),
    ] = None,
    inputs: Annotated[
        list[str] | None,
        typer.Option(
            "--input",
            "-i",
            metavar="KEY=VALUE",
            help="Change a state value: key=value (a string) or key:=<json>. Repeatable.",
        ),
    ] = None,
    input_file: Annotated[
        str | None,
        typer.Option(
            "--input-file",
            metavar="FILE",
            help="A JSON or YAML mapping of state changes ('-' reads stdin); -i wins.",
        ),
    ] = None,
    new_id: Annotated[
        str | None,
        typer.Option("--run-id", metavar="ID", help="The new run's id (default: generated)."),
    ] = None,
    detach: Annotated[
        bool, typer.Option("--detach", help="Queue the fork and advance it in the background.")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Fork even though the template changed since.")
    ] = False,
) -> None:
    """Start a new run from a checkpoint of RUN, optionally with changed state, and follow it
    like `run` does. The new run records where it came from; RUN is left as it is."""
    if at is not None and checkpoint is not None:
        raise UsageError("give --at STEP or --checkpoint ID, not both")
    changes = parse_inputs(inputs or (), input_file)
    from stageline.runner import new_run_id

    rid = new_run_id() if new_id is None else check_run_id(new_id, "--run-id")
    if detach:
        run_async(_fork_detached(run_id, at, checkpoint, changes, rid, force))
        return
    console().print(f"forking run {run_id} as run {rid}")
    advance_in_foreground(
        rid,
        lambda runner: runner.fork(
            run_id, at_step=at, checkpoint_id=checkpoint, changes=changes, fork_id=rid, force=force
        ),
    )


async def _fork_detached(
    run_id: str,
    at: int | None,
    checkpoint: str | None,
    changes: dict[str, object],
    rid: str,
    force: bool,
) -> None:
    from stageline.cli._detach import hand_off
    from stageline.runner import Runner

    async with Runner.open() as runner:
        made = await runner.fork(
            run_id,
            at_step=at,
            checkpoint_id=checkpoint,
            changes=changes,
            fork_id=rid,
            advance=False,
            force=force,
        )
        settings = runner.settings
    lineage = made.lineage
    step = f" at step {lineage.parent_step}" if lineage else ""
    console().print(f"forked run {run_id}{step} as run {rid}")
    await hand_off(settings, rid)


def lineage_lines(summary: RunSummary) -> list[str]:
    """``forked from RUN at step N`` and the runs forked from this one, for ``show``."""
    lines: list[str] = []
    if summary.lineage is not None:
        lin = summary.lineage
        lines.append(
            f"forked from run {lin.parent_run_id} at step {lin.parent_step} "
            f"(checkpoint {lin.parent_checkpoint_id})"
        )
    if summary.forks:
        forks = ", ".join(f"{f.run_id} (at step {f.parent_step})" for f in summary.forks)
        lines.append(f"forks: {forks}")
    return lines


COMMANDS = (history, fork)
