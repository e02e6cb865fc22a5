"""``stageline github``: GitHub as sdlc's forge, for projects without webhooks.

``intake`` looks once at the open issues that carry ``[github] intake_label`` in every
configured repository and starts the runs not started yet (one per issue, whoever started it:
this command, the webhook, or ``stageline serve``'s own poll), queued for a worker like
``run --detach``.
"""

from __future__ import annotations

import typer

from stageline.cli._aio import run_async
from stageline.cli._config import load_settings
from stageline.cli._render import console

__all__ = ["github_app"]

github_app = typer.Typer(
    name="github",
    help="GitHub as sdlc's forge: start runs from labelled issues ([github] in stageline.toml).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@github_app.command()
def intake() -> None:
    """Start a run for each open issue labelled with [github] intake_label (once per issue)."""
    from stageline.cli._detach import hand_off
    from stageline.forge import github_settings
    from stageline.runner import ForgeAccess, Runner
    from stageline.server.forge import poll_issues

    settings = load_settings()
    forge = github_settings(settings)  # a ConfigError before anything is opened

    async def go() -> None:
        access = ForgeAccess(settings, github=forge)  # one client, the runner's too
        try:
            async with Runner.open(settings, forge=access) as runner:
                found = await poll_issues(runner, forge, access.client)
        finally:
            await access.aclose()
        out = console()
        if not found:
            out.print(f"no open issue is labelled {forge.intake_label!r}")
        for item in found:
            said = "started run" if item.started else "has run"
            out.print(f"{item.repo}#{item.number}: {said} {item.run_id}")
            if item.started:
                await hand_off(settings, item.run_id)

    run_async(go())
