"""What ``run`` and ``fork`` share: the options that give a new run its state and its id, and
launching it: followed in the foreground, or queued for a worker with ``--detach``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stageline.cli._aio import run_async
from stageline.cli._detach import queue_for_worker
from stageline.cli._foreground import advance_in_foreground
from stageline.cli._render import console
from stageline.names import check_run_id

if TYPE_CHECKING:
    from stageline.runner import Runner, RunSummary

__all__ = [
    "RunIdOpt",
    "chosen_run_id",
    "detach_option",
    "input_file_option",
    "inputs_option",
    "launch",
]


def inputs_option(what: str) -> Any:
    """``--input/-i KEY=VALUE``, repeatable; ``what`` names one (``An input``)."""
    return typer.Option(
        "--input",
        "-i",
        metavar="KEY=VALUE",
        help=f"{what}: key=value (a string) or key:=<json>. Repeatable.",
    )


def input_file_option(what: str) -> Any:
    """``--input-file FILE``: a mapping of ``what`` (``inputs``)."""
    return typer.Option(
        "--input-file",
        metavar="FILE",
        help=f"A JSON or YAML mapping of {what} ('-' reads stdin); -i wins.",
    )


def detach_option(what: str) -> Any:
    """``--detach``: queue ``what`` (``the run``) for a worker."""
    return typer.Option("--detach", help=f"Queue {what} and advance it in the background.")


RunIdOpt = Annotated[
    str | None,
    typer.Option("--run-id", metavar="ID", help="The new run's id (default: generated)."),
]


def chosen_run_id(given: str | None) -> str:
    """The new run's id: ``--run-id`` if given (checked as a name), else a generated one."""
    from stageline.runner import new_run_id

    return new_run_id() if given is None else check_run_id(given, "--run-id")


def launch(
    run_id: str,
    start: Callable[[Runner], Awaitable[RunSummary]],
    queue: Callable[[Runner], Awaitable[Any]],
    *,
    detach: bool,
    following: str | None = None,
    queued: Callable[[Any], str | None] = lambda made: None,
) -> None:
    """Start run ``run_id`` and follow it to where it stops (``following`` printed first), or
    with ``detach`` ``queue`` it and hand it to a worker (``queued(made)`` printed first)."""
    if detach:
        run_async(queue_for_worker(run_id, queue, queued))
        return
    if following is not None:
        console().print(following)
    advance_in_foreground(run_id, start)
