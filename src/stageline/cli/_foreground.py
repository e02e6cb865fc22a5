"""Advancing one run in the foreground: live progress, then the outcome and the exit code."""

from __future__ import annotations

import signal
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import typer

from stageline.cli._codes import EXIT_INTERRUPTED, exit_code_for
from stageline.cli._hints import PREFIXES as HINTS
from stageline.cli._render import ProgressSink, console, result_lines
from stageline.cli._render_waits import waiting_lines
from stageline.ledger import RunStatus

if TYPE_CHECKING:
    from rich.text import Text

    from stageline.runner import Runner, RunSummary

__all__ = ["advance_in_foreground"]


def advance_in_foreground(
    run_id: str,
    action: Callable[[Runner], Awaitable[RunSummary]],
) -> None:
    """Advance one run with live progress; exit by where the run stopped (``exit_code_for``:
    the same table for every command that advances a run, ``reject`` included).

    A run that stops at a gate or question says what it waits on and how to decide.
    """
    import asyncio

    from stageline.runner import Runner

    out = console()
    began = time.monotonic()
    in_memory: list[bool] = []

    async def advance() -> RunSummary:
        # SIGTERM stops the run as Ctrl-C does: the task is cancelled, the runner closes (the
        # run stays resumable from its last checkpoint), and the same hint is printed.
        loop, task, terminated = asyncio.get_running_loop(), asyncio.current_task(), []

        def on_sigterm() -> None:
            terminated.append(signal.SIGTERM)
            if task is not None:
                task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            async with Runner.open(sinks=(ProgressSink(out),)) as runner:
                in_memory.append(runner.settings.database_url.startswith("memory://"))
                return await action(runner)
        except asyncio.CancelledError:
            if terminated:
                raise KeyboardInterrupt from None
            raise
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    try:
        summary = asyncio.run(advance())
    except KeyboardInterrupt:
        if any(in_memory):
            typer.echo(f"interrupted; run {run_id} was kept in memory only, and is gone", err=True)
        else:
            typer.echo(
                f"interrupted; continue run {run_id} with `stageline resume {run_id}`", err=True
            )
        raise typer.Exit(EXIT_INTERRUPTED) from None
    lines = result_lines(summary.run, summary.state, time.monotonic() - began)
    shown = [*lines[:-1], *waiting_lines(summary.run.run_id, summary.waiting), lines[-1]]
    if any(in_memory):
        shown = [line for line in shown if not line.plain.startswith(_COMMANDS)] + [
            _gone(summary.status)
        ]
    for line in shown:
        out.print(line)
    raise typer.Exit(exit_code_for(summary.status))


_COMMANDS = tuple(
    f"  {verb}"
    for verb in (
        "approve:",
        "changes:",
        "reject:",
        "answer:",
        "details:",
        "continue with:",
        *HINTS,
    )
)
"""The lines that name a command to run next on the run: none works on a run kept in memory."""


def _gone(status: RunStatus) -> Text:
    from rich.text import Text

    text = "  kept in memory only: this run is gone now that the command ends"
    if not status.terminal:  # waiting, failed, parked: a person would act on it next
        text += "; to decide, answer, resume or retry a run, run it without --ephemeral"
    return Text(text, style="dim")
