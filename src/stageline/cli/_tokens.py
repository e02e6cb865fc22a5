"""``stageline token``: API tokens for ``stageline serve``; only a hash of each is kept."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._render import console, print_json, when
from stageline.errors import UsageError
from stageline.ledger import LedgerStore, Scope, Token, hash_token, new_token, open_ledger

__all__ = ["token_app"]

T = TypeVar("T")

token_app = typer.Typer(
    name="token",
    help="API tokens for `stageline serve`: create (shown once), list, revoke.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

NameArg = Annotated[
    str, typer.Argument(metavar="NAME", help="The token's name: the actor of what it does.")
]


def _with_ledger(work: Callable[[LedgerStore], Awaitable[T]]) -> T:
    """``work`` on the ledger alone: tokens need no checkpoint, so no LangGraph."""

    async def go() -> T:
        async with open_ledger(load_settings().database_url) as ledger:
            return await work(ledger)

    return run_async(go())


@token_app.command("create")
def create(
    name: NameArg,
    scope: Annotated[
        Scope,
        typer.Option(
            "--scope",
            metavar="SCOPE",
            case_sensitive=False,
            help="read (look), decide (also start, decide, answer, retry, "
            "resume) or admin (also cancel, prune, fork, settle effects).",
        ),
    ] = Scope.READ,
) -> None:
    """Create a token and print it once, alone on the last line; only its hash is stored."""
    secret = new_token()
    token: Token = _with_ledger(lambda ledger: ledger.create_token(name, scope, hash_token(secret)))
    typer.echo(
        f"created token {token.name!r} with scope {token.scope}; it is shown only now, "
        "so keep it (send it as `Authorization: Bearer TOKEN` or `x-api-key: TOKEN`):"
    )
    typer.echo(secret)


@token_app.command("list")
def list_tokens(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
    every: Annotated[bool, typer.Option("--all", help="Revoked tokens too.")] = False,
) -> None:
    """List tokens: name, scope, when made and revoked (never the token itself)."""
    found = [t for t in _with_ledger(lambda ledger: ledger.tokens()) if every or t.active]
    if as_json:
        print_json([t.to_dict() for t in found])
        return
    if not found:
        console().print("no tokens; create one with `stageline token create NAME --scope read`")
        return
    from rich.table import Table

    table = Table("name", "scope", "created", "revoked")
    for t in found:
        table.add_row(
            t.name, str(t.scope), when(t.created_at), when(t.revoked_at) if t.revoked_at else ""
        )
    console().print(table)


@token_app.command("revoke")
def revoke(name: NameArg) -> None:
    """Revoke a token: the server refuses it from the next request on."""
    if not _with_ledger(lambda ledger: ledger.revoke_token(name)):
        raise UsageError(f"no active token named {name!r} (see `stageline token list`)")
    typer.echo(f"revoked token {name!r}")
