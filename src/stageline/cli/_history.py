"""``history`` (every checkpoint of a run) and ``fork`` (a new run from one of them), and the
lineage lines ``show`` prints."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TYPE_CHECKING, Annotated

import typer

from stageline.cli._aio import run_async
from stageline.cli._args import RunArg
from stageline.cli._inputs import parse_inputs
from stageline.cli._launch import (
    RunIdOpt,
    chosen_run_id,
    detach_option,
    input_file_option,
    inputs_option,
    launch,
)
from stageline.cli._render import console, print_json, when
from stageline.errors import UsageError

if TYPE_CHECKING:
    from rich.console import RenderableType

    from stageline.runner import CheckpointInfo, Runner, RunSummary

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


def _table(found: list[CheckpointInfo]) -> RenderableType:
    """Every checkpoint, words whole: narrow, the time goes, then the ids go under the table."""
    from stageline.cli._tables import Col, fitted

    cols = [
        Col(name="step", right=True),
        Col(name="node", wrap=True),
        Col(name="next", wrap=True),
        Col(name="time", keep=1),
        Col(name="checkpoint", keep=2, under=True),
    ]
    rows = [
        [
            str(c.step),
            ", ".join(c.nodes) or ("(input)" if c.source == "input" else f"({c.source})"),
            ", ".join(c.next) or "-",
            when(c.created_at, "%H:%M:%S"),
            c.checkpoint_id,
        ]
        for c in found
    ]
    return fitted(cols, rows, labels=[f"step {c.step}" for c in found])


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
    inputs: Annotated[list[str] | None, inputs_option("Change a state value")] = None,
    input_file: Annotated[str | None, input_file_option("state changes")] = None,
    new_id: RunIdOpt = None,
    detach: Annotated[bool, detach_option("the fork")] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Fork even though the template changed since.")
    ] = False,
) -> None:
    """Start a new run from a checkpoint of RUN, optionally with changed state, and follow it
    like `run` does. The new run records where it came from; RUN is left as it is."""
    if at is not None and checkpoint is not None:
        raise UsageError("give --at STEP or --checkpoint ID, not both")
    changes = parse_inputs(inputs or (), input_file)
    rid = chosen_run_id(new_id)

    def forked(runner: Runner, advance: bool = True) -> Awaitable[RunSummary]:
        return runner.fork(
            run_id,
            at_step=at,
            checkpoint_id=checkpoint,
            changes=changes,
            fork_id=rid,
            advance=advance,
            force=force,
        )

    launch(
        rid,
        forked,
        lambda runner: forked(runner, advance=False),
        detach=detach,
        following=f"forking run {run_id} as run {rid}",
        queued=lambda made: f"forked run {run_id}{_at_step(made)} as run {rid}",
    )


def _at_step(made: RunSummary) -> str:
    lineage = made.lineage
    return f" at step {lineage.parent_step}" if lineage else ""


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
