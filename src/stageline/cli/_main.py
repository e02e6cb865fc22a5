"""The console entry point: runs the commands and turns errors into one line and an exit code."""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

import typer

from stageline.cli._app import app
from stageline.cli._clock import mark
from stageline.cli._codes import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from stageline.errors import StagelineError

__all__ = ["main", "run_cli"]

DEBUG_VARIABLE = "STAGELINE_DEBUG"


def _usage_errors() -> tuple[type[Exception], ...]:
    """Typer's usage errors: its own since it vendored click (0.2x), click's before that."""
    found: list[type[Exception]] = []
    if hasattr(typer, "TyperException"):
        found.append(typer.TyperException)
    try:
        import click
    except ImportError:  # pragma: no cover - typer no longer needs click
        pass
    else:
        found.append(click.ClickException)
    return tuple(found)


_USAGE_ERRORS = _usage_errors()


def _debug() -> bool:
    return os.environ.get(DEBUG_VARIABLE, "").strip().lower() not in ("", "0", "false", "no")


def _error(text: str) -> None:
    sys.stderr.write(f"{text}\n")
    sys.stderr.flush()


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (see ``stageline --help``)."""
    mark()
    debug = _debug()
    command = typer.main.get_command(app)
    try:
        result = command.main(
            args=list(argv) if argv is not None else None,
            prog_name="stageline",
            standalone_mode=False,
        )
    except typer.Exit as exc:
        return int(exc.exit_code)
    except _USAGE_ERRORS as exc:
        show = getattr(exc, "show", None)
        if callable(show):
            show()
        else:
            _error(f"error: {exc}")
        return EXIT_USAGE
    except (typer.Abort, KeyboardInterrupt):
        _error("interrupted")
        return EXIT_INTERRUPTED
    except StagelineError as exc:
        if debug:
            traceback.print_exc()
        _error(f"error: {exc}")
        return exc.exit_code
    except Exception as exc:
        if debug:
            traceback.print_exc()
            _error(f"internal error: {type(exc).__name__}: {exc}")
        else:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            _error(
                f"internal error: {type(exc).__name__}{': ' if first else ''}{first} "
                f"(rerun with {DEBUG_VARIABLE}=1 for the traceback)"
            )
        return EXIT_INTERNAL
    return result if isinstance(result, int) else EXIT_OK


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``stageline`` console script."""
    logging.basicConfig(format="%(levelname)s %(name)s: %(message)s", level=logging.WARNING)
    # A type its allowlist blocks: stageline refuses the checkpoint with its own error instead.
    logging.getLogger("langgraph.checkpoint.serde.jsonplus").setLevel(logging.ERROR)
    if _debug():
        logging.getLogger("stageline").setLevel(logging.DEBUG)
    sys.exit(run_cli(argv))
