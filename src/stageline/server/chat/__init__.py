"""Two-way chat: the Slack app (commands, buttons, modals, thread replies) and signed one-time
decision links, as views over the gates and questions in the ledger.

``install_chat(app)`` adds the routes; ``chat_running(app, runner)`` (in the app's lifespan)
starts the Slack deliverer.
"""

from __future__ import annotations

from fastapi import FastAPI

from stageline.server.chat._runtime import ChatRuntime, chat_running
from stageline.server.chat._settings import ChatSettings

__all__ = ["ChatRuntime", "ChatSettings", "chat_running", "install_chat"]


def install_chat(app: FastAPI) -> None:
    """The Slack request URLs (``/slack/...``) and the decision links (``/links/...``); a
    ``[slack]`` secret whose variable is not set is a ``ConfigError`` here, before serving."""
    from stageline.server.chat._links import router as links
    from stageline.server.chat._slack import router as slack

    app.state.chat_settings = ChatSettings.of(app.state.settings)
    app.include_router(slack)
    app.include_router(links)
