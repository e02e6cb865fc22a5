"""The chat part of a running server: the Slack deliverer, the Web client the routes answer
with, decision links, and the decisions carried out in the background."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request

from stageline.errors import StagelineError
from stageline.events import Deliverer, SinkSpec
from stageline.events._links import DecisionLinks
from stageline.runner import Runner
from stageline.server.chat._settings import ChatSettings
from stageline.server.chat._sink import SLACK_POLICY, SlackSink

__all__ = ["ANSWER_WITHIN", "ChatRuntime", "chat_running", "get_chat"]

_log = logging.getLogger("stageline.server")

ANSWER_WITHIN = 2.0
"""Seconds a Slack request waits for its decision before answering (Slack allows 3)."""
SINK_ID = "chat:slack"
"""The Slack deliverer's cursors in the outbox (apart from any ``[[sinks]]`` table's)."""


class ChatRuntime:
    """What the chat routes use, made when the server starts."""

    def __init__(self, chat: ChatSettings, runner: Runner) -> None:
        self.chat = chat
        self.runner = runner
        self.sink: SlackSink | None = None
        self.deliverer: Deliverer | None = None
        self.links = DecisionLinks(chat.public_url, runner.ledger) if chat.public_url else None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        if not self.chat.slack:
            return
        self.sink = SlackSink(self.chat, self.runner.ledger)
        spec = SinkSpec(sink=self.sink, policy=SLACK_POLICY, sink_id=SINK_ID, give_up_after=None)
        self.deliverer = Deliverer(self.runner.ledger, [spec], poll=0.5)
        self.runner.bus.add(self.deliverer)
        await self.deliverer.start()
        self.chat.announce()

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        if self.deliverer is not None:
            await self.deliverer.stop(1.0)

    async def call(self, method: str, **kwargs: Any) -> dict[str, Any] | None:
        """A Web API call made while answering a request; a failure is logged, not raised."""
        if self.sink is None:
            return None
        try:
            return await self.sink.call(method, **kwargs)
        except Exception as exc:
            _log.warning("slack %s failed: %s", method, getattr(exc, "reason", type(exc).__name__))
            return None

    async def tell(self, channel: str | None, user: str, text: str) -> None:
        """An ephemeral message: only ``user`` sees it."""
        if channel:
            await self.call("chat.postEphemeral", channel=channel, user=user, text=text)

    async def carry(
        self, work: Awaitable[Any], report: Callable[[StagelineError], Awaitable[None]]
    ) -> None:
        """Carry out a decision in the background: wait for it briefly (Slack wants an answer
        within three seconds); a refusal (stale, already decided...) is ``report``ed."""

        async def run() -> None:
            try:
                await work
            except StagelineError as exc:
                await report(exc)
            except Exception:
                _log.exception("a decision from chat failed")

        task = asyncio.create_task(run())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await asyncio.wait({task}, timeout=ANSWER_WITHIN)


def get_chat(request: Request) -> ChatRuntime:
    chat: ChatRuntime = request.app.state.chat
    return chat


@contextlib.asynccontextmanager
async def chat_running(app: FastAPI, runner: Runner) -> AsyncIterator[ChatRuntime]:
    """Start the chat part of the app over ``runner`` (in its lifespan); stop it on exit."""
    chat = getattr(app.state, "chat_settings", None) or ChatSettings.of(runner.settings)
    runtime = ChatRuntime(chat, runner)
    app.state.chat = runtime
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()
