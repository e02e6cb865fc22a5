"""The console entry point: runs the commands and turns errors into one line and an exit code."""

from __future__ import annotations

import copy
import logging
import os
import sys
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import typer

from stageline.cli._app import HELP_OPTIONS, app
from stageline.cli._clock import mark
from stageline.cli._codes import EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from stageline.errors import StagelineError

if TYPE_CHECKING:
    from typer.models import CommandInfo

__all__ = ["main", "run_cli"]

DEBUG_VARIABLE = "STAGELINE_DEBUG"


def _usage_errors() -> tuple[type[Exception], ...]:
    """Typer's usage errors: its own since it vendored click (0.2x), click's before that (click
    is not imported where typer has its own: it would be start-up time for nothing)."""
    if hasattr(typer, "TyperException"):
        return (typer.TyperException,)
    found: list[type[Exception]] = []
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


def _cut_to_command(args: Sequence[str]) -> typer.Typer:
    """``app`` with only the command (or command group) that ``args`` start with, beside the
    root options; the whole app when they start with an option or a name it does not know.

    Typer builds the parameters of every registered command from its signature on each start
    (evaluating its annotations): 29 commands, groups' included, 6% of the instructions of
    ``stageline runs``, when a process runs one. Help, usage errors and the command's behaviour
    are the same: the command is the one registered, under the same root.
    """
    name = args[0] if args else ""
    if name.startswith("-"):
        return app
    commands = [
        info
        for info in app.registered_commands
        if info.callback is not None
        and (info.name or typer.main.get_command_name(info.callback.__name__)) == name
    ]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return app
    cut = copy.copy(app)
    cut.registered_commands = commands
    cut.registered_groups = groups
    return cut


def _listed(info: CommandInfo) -> CommandInfo:
    """The command as a group's help lists it: its name and help text, no parameters.

    Listing a command needs only its name and the first sentence of its help, but typer
    builds a command's parameters (evaluating its annotations) whenever it builds the command:
    for the root's ``--help``, a quarter of the instructions of the whole process.
    """
    callback = info.callback
    assert callback is not None

    def listed() -> None:  # pragma: no cover - never invoked: help exits first
        """Never called: only listed."""

    listed.__name__ = callback.__name__
    listed.__doc__ = callback.__doc__
    stub = copy.copy(info)
    stub.callback = listed
    return stub


def _for_group_help(group: typer.Typer) -> typer.Typer:
    """``group`` as its own ``--help`` prints it, its commands (and sub-groups') listed only."""
    cut = copy.copy(group)
    cut.registered_commands = [_listed(info) for info in group.registered_commands]
    cut.registered_groups = []
    for info in group.registered_groups:
        listed = copy.copy(info)
        if info.typer_instance is not None:
            listed.typer_instance = _for_group_help(info.typer_instance)
        cut.registered_groups.append(listed)
    return cut


def _root_help(args: Sequence[str]) -> bool:
    """Whether ``args`` ask only for the root's help (no arguments: ``no_args_is_help``)."""
    return all(arg in HELP_OPTIONS for arg in args)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit code (see ``stageline --help``)."""
    mark()
    debug = _debug()
    args = list(argv) if argv is not None else sys.argv[1:]
    cut = _for_group_help(app) if _root_help(args) else _cut_to_command(args)
    command = typer.main.get_command(cut)
    try:
        result = command.main(
            args=args,
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
