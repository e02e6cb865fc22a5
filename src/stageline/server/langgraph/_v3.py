"""LangGraph's v3 thread streams (``client.threads.stream``): each thread's protocol events.

An API run started by a v3 command (``run.start``, ``input.respond``) is followed here: its
event log (``EventLog``, in ``values`` and ``updates``) becomes the protocol's events on the
thread's feed, between ``lifecycle`` ``running`` and how it ended: ``completed``, ``failed``
(with its error), or ``input.requested`` for each interrupt it waits on, then ``interrupted``.
Each event is numbered on its thread (``seq``, from 1); a stream reads the feed from the start
of the thread's latest API run, or after the ``since`` it gives.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import HTTPConnection

from stageline.errors import StagelineError
from stageline.ledger import ApiRun, ApiRunStatus, RunStatus
from stageline.runner import Runner
from stageline.server.langgraph._events import EventLog
from stageline.server.langgraph._lookup import snapshot
from stageline.server.langgraph._mapping import interrupt_json, jsonable

__all__ = ["CHANNELS", "Feeds", "Filter", "ThreadFeed", "channel_of"]

_log = logging.getLogger("stageline.server")

CHANNELS = frozenset(
    {"values", "updates", "messages", "tools", "custom", "lifecycle", "input", "tasks"}
)
"""The channels a stream may ask for (also ``custom:<name>``), as LangGraph's server takes."""
KEPT_FEEDS = 200
"""How many threads' feeds the server keeps (the latest used)."""


def channel_of(method: str) -> str:
    """The channel an event of ``method`` is on (``input.requested``: ``input``)."""
    return method.split(".", 1)[0]


@dataclass(frozen=True)
class Filter:
    """What a stream asks for: its channels, under which namespaces, how deep, after which
    ``seq`` (``since``; None: from the start of the thread's latest API run)."""

    channels: frozenset[str]
    namespaces: list[list[str]] | None = None
    depth: int | None = None
    since: int | None = None

    @classmethod
    def of(cls, body: Any) -> Filter | str:
        """The filter a stream's body (or ``subscription.subscribe``'s params) asks for, or
        why it cannot be served (LangGraph's words)."""
        body = body if isinstance(body, Mapping) else {}
        channels = body.get("channels")
        if not isinstance(channels, list) or not channels:
            return "channels is required and must be a non-empty array"
        bad = [
            c if isinstance(c, str) else repr(c)
            for c in channels
            if not (isinstance(c, str) and (c in CHANNELS or (c.startswith("custom:") and c[7:])))
        ]
        if bad:
            return (
                f"channels contains unsupported entries: {', '.join(bad[:5])}. Allowed: "
                "values, updates, messages, tools, custom, lifecycle, input, tasks, or any "
                "`custom:<name>`."
            )
        namespaces = body.get("namespaces")
        if not (
            isinstance(namespaces, list)
            and all(isinstance(n, list) and all(isinstance(s, str) for s in n) for n in namespaces)
        ):
            namespaces = None
        depth, since = _count(body.get("depth")), _count(body.get("since"))
        return cls(frozenset(channels), namespaces, depth, since)

    def wanted(self, event: Mapping[str, Any]) -> bool:
        """Whether the stream gets ``event``."""
        channel = channel_of(str(event.get("method")))
        if channel not in self.channels and not (
            channel == "custom" and any(c.startswith("custom:") for c in self.channels)
        ):
            return False
        if self.namespaces is None:
            return True
        params = event.get("params")
        found = list(params.get("namespace") or []) if isinstance(params, Mapping) else []
        return any(
            found[: len(prefix)] == prefix
            and (self.depth is None or len(found) - len(prefix) <= self.depth)
            for prefix in self.namespaces
        )

    async def follow(
        self, feed: ThreadFeed, heartbeat: float
    ) -> AsyncIterator[dict[str, Any] | None]:
        """The events the stream gets, as they come, forever; None after ``heartbeat`` seconds
        without one."""
        seen = feed.latest_start if self.since is None else self.since
        while True:
            await feed.wait(seen, heartbeat)
            if feed.seq <= seen:
                yield None
                continue
            for event in feed.events[seen:]:
                seen = event["seq"]
                if self.wanted(event):
                    yield event


def _count(value: Any) -> int | None:
    """A count from JSON (not a boolean, not negative), or None."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


class ThreadFeed:
    """One thread's protocol events, in order; streams follow it."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.latest_start = 0
        """The ``seq`` just before the thread's latest API run's first event."""
        self._changed = asyncio.Event()

    @property
    def seq(self) -> int:
        return len(self.events)

    def begin(self) -> int:
        """A new API run's events begin here; returns the ``seq`` before them."""
        self.latest_start = self.seq
        return self.latest_start

    def add(self, method: str, data: Any, *, key: str, node: str | None = None) -> None:
        params: dict[str, Any] = {"namespace": [], "timestamp": int(time.time() * 1000)}
        if node is not None:
            params["node"] = node
        params["data"] = data
        self.events.append(
            {
                "type": "event",
                "event_id": f"{key}:{self.seq + 1}",
                "seq": self.seq + 1,
                "method": method,
                "params": params,
            }
        )
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait(self, after: int, timeout: float) -> None:
        """Until an event after ``after`` is on the feed, or ``timeout`` seconds passed."""
        changed = self._changed
        if self.seq > after:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), timeout)


class Feeds:
    """The feeds of the threads v3 commands ran on, and the API runs being followed onto them."""

    def __init__(self) -> None:
        self._feeds: OrderedDict[str, ThreadFeed] = OrderedDict()
        self._pumps: set[asyncio.Task[None]] = set()

    @classmethod
    def of(cls, request: HTTPConnection) -> Feeds:
        found = getattr(request.app.state, "langgraph_feeds", None)
        if found is None:
            found = cls()
            request.app.state.langgraph_feeds = found
        return found

    def feed(self, thread_id: str) -> ThreadFeed:
        found = self._feeds.get(thread_id)
        if found is None:
            found = self._feeds[thread_id] = ThreadFeed()
            while len(self._feeds) > KEPT_FEEDS:
                self._feeds.popitem(last=False)
        self._feeds.move_to_end(thread_id)
        return found

    def follow(
        self,
        runner: Runner,
        api_run: ApiRun,
        task: asyncio.Task[None],
        log: EventLog | None,
        graph_name: str,
    ) -> int:
        """Put the API run's events on its thread's feed as they come (in the background);
        returns the ``seq`` before its first event."""
        feed = self.feed(api_run.run_id)
        before = feed.begin()
        key = api_run.api_run_id
        feed.add("lifecycle", {"event": "running", "graph_name": graph_name}, key=key)
        pump = asyncio.create_task(
            _pump(runner, feed, api_run, task, log, graph_name), name=f"v3 feed {key}"
        )
        self._pumps.add(pump)
        pump.add_done_callback(self._pumps.discard)
        return before


async def _pump(
    runner: Runner,
    feed: ThreadFeed,
    api_run: ApiRun,
    task: asyncio.Task[None],
    log: EventLog | None,
    graph_name: str,
) -> None:
    key = api_run.api_run_id
    try:
        if log is not None:
            async for _number, event, data in log.follow():
                _put(feed, key, event, data)
        await asyncio.wait([task])
        await _ending(runner, feed, api_run, graph_name)
    except Exception:  # the feed must end: a reader waits for it
        _log.exception("could not stream the end of API run %s", key)
        feed.add("lifecycle", {"event": "failed", "graph_name": graph_name}, key=key)


def _put(feed: ThreadFeed, key: str, event: str, data: Any) -> None:
    if event == "values" and isinstance(data, Mapping):
        feed.add("values", {k: v for k, v in data.items() if k != "__interrupt__"}, key=key)
    elif event == "updates" and isinstance(data, Mapping):
        for node, values in data.items():
            if node != "__interrupt__":
                feed.add("updates", values, key=key, node=node)


async def _ending(runner: Runner, feed: ThreadFeed, api_run: ApiRun, graph_name: str) -> None:
    """The events of how the API run ended."""
    key = api_run.api_run_id
    ended = await runner.ledger.api_run(key) or api_run
    try:
        run = await runner.ledger.get_run(api_run.run_id)
    except StagelineError:
        run = None
    if ended.status is ApiRunStatus.ERROR or run is None or run.status is RunStatus.FAILED:
        error = ended.error or (run.error if run is not None else None) or "the run failed"
        feed.add(
            "lifecycle", {"event": "failed", "graph_name": graph_name, "error": error}, key=key
        )
        return
    if run.status is RunStatus.WAITING:
        latest = await snapshot(runner, run)
        for item in latest.interrupts if latest is not None else ():
            shown = interrupt_json(item)
            feed.add(
                "input.requested",
                {"interrupt_id": shown["id"], "payload": jsonable(shown["value"])},
                key=key,
            )
        feed.add("lifecycle", {"event": "interrupted", "graph_name": graph_name}, key=key)
        return
    feed.add("lifecycle", {"event": "completed", "graph_name": graph_name}, key=key)
