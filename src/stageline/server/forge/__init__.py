"""GitHub on ``stageline serve``: the webhook (issue intake, CI events), the issue poll, and
the issue comment mirror (with the renderer of forge facts the Slack thread uses too).

``install_forge(app)`` adds the route and resolves ``[github]`` (a token or secret variable
that is not set is a ``ConfigError`` here, before serving) into the process's one GitHub access
(``app.state.forge_access``: settings and client, which the app's runner is given too);
``forge_running(app, runner, advancer, forge)`` (in the app's lifespan) starts the poll.
"""

from __future__ import annotations

from fastapi import FastAPI

from stageline.forge import github_settings
from stageline.runner import ForgeAccess
from stageline.server.forge._comments import IssueCommentSink, marker
from stageline.server.forge._facts import comment_text, fact_line, forge_fact, slack_link
from stageline.server.forge._intake import (
    Intake,
    intake_inputs,
    issue_run_id,
    poll_issues,
    start_for_issue,
)
from stageline.server.forge._runtime import ForgeRuntime, forge_running

__all__ = [
    "ForgeRuntime",
    "Intake",
    "IssueCommentSink",
    "comment_text",
    "fact_line",
    "forge_fact",
    "forge_running",
    "install_forge",
    "intake_inputs",
    "issue_run_id",
    "marker",
    "poll_issues",
    "slack_link",
    "start_for_issue",
]


def install_forge(app: FastAPI) -> None:
    """The webhook route; ``[github]`` resolved when it lists repositories, into
    ``app.state.forge_access`` (None without it)."""
    from stageline.server.forge._webhook import router

    settings = app.state.settings
    app.state.forge_access = (
        ForgeAccess(settings, github=github_settings(settings)) if settings.github.enabled else None
    )
    app.include_router(router)
