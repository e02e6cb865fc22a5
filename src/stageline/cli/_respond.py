"""``stageline respond``: answer an interrupt a graph made itself (``interrupt(value)``).

The answer is the value the node's ``interrupt()`` returns: JSON (``--value``), or text
(``--text``). The runner records it first (first answer wins), then resumes the run, followed
here like ``resume``; the exit code says where the run stopped (``_codes``).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from stageline.cli._args import RunArg
from stageline.cli._clock import began
from stageline.cli._foreground import advance_in_foreground
from stageline.cli._human import AsOpt, ForceOpt
from stageline.errors import InputError, UsageError

__all__ = ["respond"]


def respond(
    run_id: RunArg,
    value: Annotated[
        str | None,
        typer.Option(
            "--value",
            "-v",
            metavar="JSON",
            help='The answer as JSON (for an Agent-Inbox interrupt: {"type": "accept"}, ...).',
        ),
    ] = None,
    text: Annotated[
        str | None,
        typer.Option("--text", "-t", metavar="TEXT", help="The answer as plain text."),
    ] = None,
    wait_id: Annotated[
        str | None,
        typer.Option(
            "--wait", metavar="ID", help="Which interrupt (its id, `stageline pending RUN`)."
        ),
    ] = None,
    actor: AsOpt = None,
    force: ForceOpt = False,
) -> None:
    """Answer the interrupt RUN waits at with a JSON value (or text); the run goes on."""
    seen = began()  # binds the answer to the interrupt waiting then
    answer = _answer(value, text)
    advance_in_foreground(
        run_id,
        lambda runner: runner.respond(
            run_id, answer, wait_id=wait_id, actor=actor, force=force, seen_at=seen
        ),
    )


def _answer(value: str | None, text: str | None) -> Any:
    if (value is None) == (text is None):
        raise UsageError("give the answer with one of --value JSON or --text TEXT")
    if text is not None:
        return text
    assert value is not None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"--value is not JSON ({exc.msg} at column {exc.colno}); quote text with --text"
        ) from None
