"""Arguments several commands share: a run id is checked as a name before anything runs."""

from __future__ import annotations

from typing import Annotated

import typer

from stageline.names import check_run_id

__all__ = ["OptionalRunArg", "RunArg", "checked_run_id"]


def checked_run_id(value: str | None) -> str | None:
    """A typer callback: the run id if it is well formed, else an ``InputError`` (exit 2)."""
    return None if value is None else check_run_id(value, "RUN")


RunArg = Annotated[str, typer.Argument(metavar="RUN", help="A run id.", callback=checked_run_id)]
OptionalRunArg = Annotated[
    str | None,
    typer.Argument(metavar="[RUN]", help="Only this run.", callback=checked_run_id),
]
