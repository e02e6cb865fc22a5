"""The GitHub part of a running server: the process's GitHub access (settings, secrets read
when it starts, and the one client, which the runner uses too), the issue comment mirror (an
outbox deliverer) and the issue poll of ``[github] poll_issues``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request

from stageline.errors import StagelineError
from stageline.events import Deliverer, SinkSpec
from stageline.forge import GitHubSettings
from stageline.server.forge._comments import COMMENTS_FILTER, COMMENTS_POLICY, IssueCommentSink
from stageline.server.forge._intake import poll_issues

if TYPE_CHECKING:
    from stageline.forge import GitHubClient
    from stageline.runner import ForgeAccess, Runner
    from stageline.server._advancer import Advancer

__all__ = ["ForgeRuntime", "forge_running", "get_forge"]

_log = logging.getLogger("stageline.forge")

SINK_ID = "forge:github-comments"
"""The comment mirror's cursors in the outbox."""


class ForgeRuntime:
    """What the webhook route and the poll use; ``forge`` (and ``settings``) is None without
    ``[github]``. It does not close ``forge``: the process's owner of it does."""

    def __init__(self, forge: ForgeAccess | None, runner: Runner, advancer: Advancer | None):
        self.forge = forge
        self.settings: GitHubSettings | None = forge.github if forge is not None else None
        self.runner = runner
        self.advancer = advancer
        self._tasks: list[asyncio.Task[Any]] = []
        self._stopping = asyncio.Event()
        self.deliverer: Deliverer | None = None

    @property
    def client(self) -> GitHubClient:
        """The process's GitHub client, made when first needed (githubkit is imported then)."""
        assert self.forge is not None
        return self.forge.client

    async def queue(self, run_id: str) -> None:
        if self.advancer is not None:
            await self.advancer.queue(run_id)

    async def poll_once(self) -> list[str]:
        """One look at the labelled issues; the runs it started."""
        assert self.settings is not None
        started = [
            i.run_id
            for i in await poll_issues(self.runner, self.settings, self.client)
            if i.started
        ]
        for run_id in started:
            await self.queue(run_id)
        return started

    async def start(self) -> None:
        if self.settings is None:
            return
        sink = IssueCommentSink(
            self.settings,
            self.runner.ledger,
            lambda: self.client,
            public_url=self.runner.settings.public_url,
        )
        spec = SinkSpec(
            sink=sink,
            filter=COMMENTS_FILTER,
            policy=COMMENTS_POLICY,
            sink_id=SINK_ID,
            give_up_after=None,
        )
        self.deliverer = Deliverer(self.runner.ledger, [spec], poll=0.5)
        self.runner.bus.add(self.deliverer)
        await self.deliverer.start()
        if self.settings.poll_issues:
            self._tasks.append(asyncio.create_task(self._poll(), name="stageline github poll"))

    async def stop(self) -> None:
        self._stopping.set()
        if self.deliverer is not None:
            await self.deliverer.stop(1.0)
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)

    async def _poll(self) -> None:
        assert self.settings is not None
        while not self._stopping.is_set():
            try:
                started = await self.poll_once()
                if started:
                    _log.info("github: labelled issues started %s", ", ".join(started))
            except StagelineError as exc:  # GitHub down, a bad checkout: said, tried again
                _log.warning("github: the issue poll failed: %s", exc)
            except Exception:
                _log.exception("github: the issue poll failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self.settings.poll_interval)


def get_forge(request: Request) -> ForgeRuntime:
    forge: ForgeRuntime = request.app.state.forge
    return forge


@contextlib.asynccontextmanager
async def forge_running(
    app: FastAPI, runner: Runner, advancer: Advancer | None, forge: ForgeAccess | None
) -> AsyncIterator[ForgeRuntime]:
    """Start the GitHub part of the app (in its lifespan) over ``forge``, the process's GitHub
    access (the runner's too); stop it on exit (closing ``forge`` is its owner's)."""
    runtime = ForgeRuntime(forge, runner, advancer)
    app.state.forge = runtime
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.stop()
