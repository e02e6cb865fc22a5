"""A LangGraph API run's progress as server-sent events: ``metadata``, then ``values`` and
``updates`` read from the run's checkpoints as the advance writes them, ``error`` if it failed.

The advance itself goes on whatever the client does; the events come from the checkpoints
LangGraph saved (``aget_state_history``), so what the stream shows is what was saved.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterable
from typing import Any

from stageline.ledger import ApiRun, ApiRunStatus
from stageline.runner import Runner
from stageline.server.langgraph._lookup import config_of
from stageline.server.langgraph._mapping import interrupt_json, jsonable, public_values

__all__ = ["STREAM_MODES", "sse", "stream_run"]

STREAM_MODES = ("values", "updates")
"""The stream modes stageline sends; others are accepted and send nothing."""
POLL = 0.1
"""Seconds between two looks for new checkpoints while the advance goes on."""


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(jsonable(data))}\n\n".encode()


async def _since(graph: Any, thread_id: str, last: str | None) -> list[Any]:
    """The checkpoints after ``last`` (and ``last`` itself, re-read), oldest first."""
    found: list[Any] = []
    async for snap in graph.aget_state_history(config_of(thread_id)):
        found.append(snap)
        if last is not None and snap.config["configurable"]["checkpoint_id"] == last:
            break
    found.reverse()
    return found


def _events(modes: Iterable[str], before: Any | None, snap: Any) -> list[bytes]:
    """The events of one new checkpoint: the updates of the tasks that made it (from its
    parent), then its values."""
    out: list[bytes] = []
    if "updates" in modes and before is not None:
        for task in before.tasks:
            if task.name.startswith("__") or getattr(task, "result", None) is None:
                continue
            out.append(sse("updates", {task.name: task.result}))
    if "values" in modes and (snap.metadata or {}).get("source") != "input":
        out.append(sse("values", public_values(snap.values)))
    return out


async def stream_run(
    runner: Runner,
    api_run: ApiRun,
    template: str,
    modes: list[str],
    start: str | None,
    task: asyncio.Future[Any] | None,
    *,
    metadata: bool = True,
) -> AsyncIterator[bytes]:
    """Events of ``api_run`` from checkpoint ``start`` (None: from the thread's beginning)
    until its advance (``task``) has ended; the ``metadata`` event first unless told not."""
    if metadata:
        yield sse(
            "metadata", {"run_id": api_run.api_run_id, "thread_id": api_run.run_id, "attempt": 1}
        )
    graph = runner.graph(template)
    thread_id = api_run.run_id
    last = start
    previous: Any | None = None
    while True:
        finished = task is None or task.done()
        found = await _since(graph, thread_id, last)
        if last is not None and found and found[0].config["configurable"]["checkpoint_id"] == last:
            previous, found = found[0], found[1:]
        for snap in found:
            for event in _events(modes, previous, snap):
                yield event
            previous = snap
            last = snap.config["configurable"]["checkpoint_id"]
        if finished:
            break
        assert task is not None
        await asyncio.wait({task}, timeout=POLL)
    if previous is not None and previous.interrupts:
        waiting = [interrupt_json(i) for i in previous.interrupts]
        for mode in modes:
            if mode in STREAM_MODES:
                yield sse(mode, {"__interrupt__": waiting})
    ended = await runner.ledger.api_run(api_run.api_run_id)
    if ended is not None and ended.status is ApiRunStatus.ERROR:
        yield sse("error", {"error": "RunError", "message": ended.error or "the run failed"})
