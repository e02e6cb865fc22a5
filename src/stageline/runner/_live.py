"""Following an advance live: the LangGraph stream modes a caller asked for, handed to it as
the graph makes them (a LangGraph API run's stream).

Whoever starts an advance sets a ``LiveStream`` with ``live_stream``; the advance started in
that context (and in the tasks it creates) streams the graph in those modes as well as its own
and passes each part to ``put`` as ``(namespace, mode, chunk)``: the parts of LangGraph's
``astream`` (``values``, ``updates``, ``messages``, ``custom``, ``tasks``, ``checkpoints``,
``debug``), and with ``events`` each ``astream_events`` v2 event as mode ``events``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

__all__ = ["GRAPH_MODES", "LiveStream", "current_live", "graph_parts", "live_stream"]

GRAPH_MODES = frozenset(
    {"values", "updates", "messages", "custom", "tasks", "checkpoints", "debug", "events"}
)
"""The stream modes a live stream can follow (``events``: LangGraph's ``astream_events``)."""


@dataclass(frozen=True)
class LiveStream:
    modes: frozenset[str]
    """Of ``GRAPH_MODES``."""
    put: Callable[[tuple[str, ...], str, Any], None]
    subgraphs: bool = False
    """Also the parts subgraphs make (their namespace non-empty)."""


_LIVE: ContextVar[LiveStream | None] = ContextVar("stageline_live_stream", default=None)


@contextlib.contextmanager
def live_stream(stream: LiveStream) -> Iterator[None]:
    """Advances started inside (and in tasks created inside) are followed by ``stream``."""
    token = _LIVE.set(stream)
    try:
        yield
    finally:
        _LIVE.reset(token)


def current_live() -> LiveStream | None:
    return _LIVE.get()


async def graph_parts(
    graph: Any,
    payload: Any,
    config: Any,
    own: list[str],
    subgraphs: bool,
    live: LiveStream | None,
    **options: Any,
) -> AsyncIterator[tuple[tuple[str, ...], str, Any]]:
    """The graph's stream in the runner's ``own`` modes as ``(namespace, mode, chunk)``; the
    parts ``live`` asked for go to it as they come."""
    if live is None:
        async for part in _astream(graph, payload, config, own, subgraphs, **options):
            yield part
        return
    asked = live.modes - {"events"}
    modes = sorted(set(own) | asked)
    subgraphs = subgraphs or live.subgraphs
    if "events" in live.modes:
        parts = _events(graph, payload, config, modes, subgraphs, live, **options)
    else:
        parts = _astream(graph, payload, config, modes, subgraphs, **options)
    async for namespace, mode, chunk in parts:
        if mode in asked and (live.subgraphs or not namespace):
            live.put(namespace, mode, chunk)
        if mode in own:
            yield namespace, mode, chunk


async def _astream(
    graph: Any, payload: Any, config: Any, modes: list[str], subgraphs: bool, **options: Any
) -> AsyncIterator[tuple[tuple[str, ...], str, Any]]:
    async for part in graph.astream(
        payload, config, stream_mode=modes, subgraphs=subgraphs, **options
    ):
        namespace, mode, chunk = part if subgraphs else ((), *part)
        yield tuple(namespace), str(mode), chunk


async def _events(
    graph: Any,
    payload: Any,
    config: Any,
    modes: list[str],
    subgraphs: bool,
    live: LiveStream,
    **options: Any,
) -> AsyncIterator[tuple[tuple[str, ...], str, Any]]:
    """As ``_astream``, read off ``astream_events`` (as LangGraph's server does: the root
    graph's ``on_chain_stream`` events carry the stream's parts); every other event goes to
    ``live``."""
    async for event in graph.astream_events(
        payload, config, version="v2", stream_mode=modes, subgraphs=subgraphs, **options
    ):
        if event["event"] == "on_chain_stream" and not event.get("parent_ids"):
            part = event["data"]["chunk"]
            namespace, mode, chunk = part if subgraphs else ((), *part)
            yield tuple(namespace), str(mode), chunk
        else:  # the root's stream events are its parts, not events of their own
            live.put((), "events", event)
