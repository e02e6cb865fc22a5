"""A LangGraph API run's progress as server-sent events: ``metadata``, then the events of the
stream modes asked for as the advance makes them (its ``EventLog``, each numbered as its SSE
``id``), ``error`` if it failed.

The advance itself goes on whatever the client does. A run this server did not follow live
(another process advanced it, or it is older than the kept logs) is shown from the checkpoints
LangGraph saved (``aget_state_history``): its ``values`` and ``updates``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any

from stageline.ledger import ApiRun, ApiRunStatus
from stageline.runner import Runner
from stageline.server.langgraph._events import EventLog
from stageline.server.langgraph._lookup import config_of
from stageline.server.langgraph._mapping import interrupt_json, jsonable, public_values

__all__ = [
    "STREAM_MODES",
    "THREAD_STREAM_MODES",
    "sse",
    "stream_run",
    "thread_event_id",
    "thread_stream",
    "until_closed",
]

STREAM_MODES = ("values", "updates")
"""The stream modes a run not followed live is shown in (from its checkpoints)."""
THREAD_STREAM_MODES = ("run_modes", "lifecycle", "state_update")
"""What a thread's stream can follow: its runs' events, their starts and ends, state updates
(stageline sends none of these: a state update is no run)."""
POLL = 0.1
"""Seconds between two looks for new checkpoints while the advance goes on."""
THREAD_POLL = 0.2
"""Seconds between two looks for a thread's new runs (its stream)."""


def sse(event: str, data: Any, number: int | str | None = None) -> bytes:
    head = "" if number is None else f"id: {number}\n"
    return f"{head}event: {event}\ndata: {json.dumps(jsonable(data))}\n\n".encode()


def _wanted(event: str, modes: Iterable[str]) -> bool:
    mode = event.split("|", 1)[0].split("/", 1)[0]
    return mode in modes or (mode == "messages" and "messages-tuple" in modes)


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
    log: EventLog | None = None,
    after: int = 0,
    id_prefix: str = "",
) -> AsyncIterator[bytes]:
    """Events of ``api_run`` until its advance (``task``) has ended: those of its ``log``
    after number ``after`` (each with its number, after ``id_prefix``, as SSE ``id``), or else
    those read from its checkpoints after ``start`` (None: from the thread's beginning); the
    ``metadata`` event first unless told not."""
    if metadata:
        yield sse(
            "metadata", {"run_id": api_run.api_run_id, "thread_id": api_run.run_id, "attempt": 1}
        )
    if log is not None:
        async for number, event, data in log.follow(after):
            if _wanted(event, modes):
                yield sse(event, data, f"{id_prefix}{number}")
    if log is None or not (log.fed or after):  # not followed live: its checkpoints
        async for saved in _saved(runner, api_run, template, modes, start, task):
            yield saved
    ended = await runner.ledger.api_run(api_run.api_run_id)
    if ended is not None and ended.status is ApiRunStatus.ERROR:
        yield sse("error", {"error": "RunError", "message": ended.error or "the run failed"})


async def until_closed(
    events: AsyncIterator[bytes], watch: asyncio.Future[Any] | None
) -> AsyncIterator[bytes]:
    """``events``; when they end or the client goes (the generator is closed or cancelled),
    ``watch`` (a poll of the ledger this request started) is cancelled with them, not left
    polling until its run ends."""
    try:
        async for event in events:
            yield event
    finally:
        if watch is not None and not watch.done():
            watch.cancel()


async def _saved(
    runner: Runner,
    api_run: ApiRun,
    template: str,
    modes: list[str],
    start: str | None,
    task: asyncio.Future[Any] | None,
) -> AsyncIterator[bytes]:
    """The ``values`` and ``updates`` of the checkpoints after ``start`` until ``task`` ended,
    then what the run waits on."""
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


def thread_event_id(last_event_id: str | None) -> tuple[str, int] | None:
    """A thread stream's ``Last-Event-ID`` (``API_RUN_ID:NUMBER``, as its events' ids) as
    ``(api_run_id, number)``; None when not given; ``ValueError`` when it is no such id."""
    if not last_event_id:
        return None
    api_run_id, _, number = last_event_id.rpartition(":")
    if not api_run_id or not number.isdigit() or len(number) > 18:
        raise ValueError("Last-Event-ID of a thread stream is API_RUN_ID:NUMBER (an event's id)")
    return api_run_id, int(number)


async def thread_stream(
    runner: Runner,
    thread_id: str,
    modes: list[str],
    follow: Callable[
        [str], tuple[asyncio.Future[Any] | None, str | None, list[str], EventLog | None]
    ],
    resume: tuple[str, int] | None = None,
) -> AsyncIterator[bytes]:
    """A thread's runs as they come, until the client goes: each one's events (``run_modes``:
    in the modes it was started with, each with its id ``API_RUN_ID:NUMBER``; ``lifecycle``: its
    ``metadata`` only), then a ``metadata`` event ``{"status": "run_done", "run_id"}``.
    ``follow`` gives an API run's task, start checkpoint, modes and live events (its task None
    once it ended). ``resume`` (``Last-Event-ID``): the events after that one first, those of
    its run and of the runs after it, as far as the server keeps them; then as they come."""
    listed = list(reversed(await runner.ledger.api_runs(thread_id)))  # oldest first
    ids = [r.api_run_id for r in listed]
    after: dict[str, int] = {}
    if resume is not None and resume[0] in ids:
        seen = set(ids[: ids.index(resume[0])])
        after[resume[0]] = resume[1]
    else:
        seen = {r.api_run_id for r in listed if r.status.done}
    while True:
        for api_run in reversed(await runner.ledger.api_runs(thread_id)):  # oldest first
            key = api_run.api_run_id
            if key in seen:
                continue
            seen.add(key)
            task, start, own, log = follow(key)
            run = await runner.ledger.get_run(thread_id)
            resumed = key in after  # its metadata sent already; its events while kept
            if "run_modes" in modes and not (resumed and log is None):
                async for event in stream_run(
                    runner,
                    api_run,
                    run.template,
                    own,
                    start,
                    task,
                    metadata=not resumed,
                    log=log,
                    after=after.get(key, 0),
                    id_prefix=f"{key}:",
                ):
                    yield event
            elif "run_modes" not in modes:
                if "lifecycle" in modes and not resumed:
                    yield sse("metadata", {"run_id": key, "attempt": 1})
                if task is not None:
                    await asyncio.wait({task})
            if "run_modes" in modes or "lifecycle" in modes:
                yield sse("metadata", {"status": "run_done", "run_id": key})
        await asyncio.sleep(THREAD_POLL)
