"""An API run's live events: what its advance streams, as LangGraph's server names and shapes
it, numbered so that a client that lost its stream can go on after the last one it got
(``Last-Event-ID``).

Each part the runner hands over (``stageline.runner.LiveStream``) becomes one event (or, for
``messages``, LangGraph's ``messages/metadata``, ``messages/partial``, ``messages/complete``),
named ``mode`` or, from a subgraph, ``mode|namespace``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from langchain_core.messages import BaseMessageChunk, message_chunk_to_message

from stageline.runner import GRAPH_MODES, LiveStream
from stageline.server.langgraph._mapping import interrupt_json, jsonable, public_values

__all__ = ["LIVE_MODES", "EventLog"]

_log = logging.getLogger("stageline.server")

LIVE_MODES = GRAPH_MODES | {"messages-tuple"}
"""The stream modes a run's stream sends (``messages-tuple``: ``messages`` as LangGraph's
``astream`` makes them, ``[chunk, metadata]``)."""


def _interrupts(items: Any) -> list[dict[str, Any]]:
    return [interrupt_json(i) for i in items or ()]


class EventLog:
    """The events of one API run, kept while the server holds it; readers follow it.

    The advance only hands its parts over; they are shaped into events (JSON data) when a
    reader first asks for them, so that a run nobody streams costs next to nothing."""

    def __init__(self, modes: list[str], subgraphs: bool = False) -> None:
        asked = {m for m in modes if m in LIVE_MODES}
        self.tuples = "messages-tuple" in asked
        graph_modes = {"messages" if m == "messages-tuple" else m for m in asked}
        self.stream = LiveStream(frozenset(graph_modes), self.put, subgraphs)
        self.closed = False
        self._parts: list[tuple[tuple[str, ...], str, Any]] = []
        self._shaped_parts = 0
        self._events: list[tuple[str, Any]] = []
        self._changed = asyncio.Event()
        self._messages: dict[str, Any] = {}

    @property
    def fed(self) -> bool:
        """Whether the advance handed over anything (it was followed live)."""
        return bool(self._parts)

    def put(self, namespace: tuple[str, ...], mode: str, chunk: Any) -> None:
        """Keep one part of the graph's stream."""
        self._parts.append((namespace, mode, chunk))
        self._changed.set()

    def events(self) -> list[tuple[str, Any]]:
        """The events so far, each part shaped once, in order (a part LangGraph's shapes do
        not fit is left out; the advance went on whatever it held)."""
        while self._shaped_parts < len(self._parts):
            namespace, mode, chunk = self._parts[self._shaped_parts]
            self._parts[self._shaped_parts] = (namespace, mode, None)  # shaped: let it go
            self._shaped_parts += 1
            suffix = "".join(f"|{n}" for n in namespace)
            try:
                shaped = self._shaped(mode, chunk)
            except Exception:
                _log.warning("could not stream a %s part", mode, exc_info=True)
                continue
            self._events.extend((event + suffix, data) for event, data in shaped)
        return self._events

    def close(self) -> None:
        self.closed = True
        self._changed.set()

    def _shaped(self, mode: str, chunk: Any) -> list[tuple[str, Any]]:
        if mode == "values":
            data = public_values(chunk)
            if isinstance(chunk, Mapping) and "__interrupt__" in chunk:
                data["__interrupt__"] = _interrupts(chunk["__interrupt__"])
            return [("values", data)]
        if mode == "updates" and isinstance(chunk, Mapping):
            return [
                (
                    "updates",
                    {
                        node: _interrupts(update)
                        if node == "__interrupt__"
                        else (public_values(update) if isinstance(update, Mapping) else update)
                        for node, update in chunk.items()
                    },
                )
            ]
        if mode == "messages" and not self.tuples:
            return self._message(chunk)
        return [(mode, jsonable(chunk))]

    def _message(self, chunk: Any) -> list[tuple[str, Any]]:
        """As LangGraph's server streams ``messages``: a message's metadata when it begins, then
        the message so far as each chunk comes (``partial``), or whole (``complete``)."""
        message, metadata = chunk
        out: list[tuple[str, Any]] = []
        key = getattr(message, "id", None) or ""
        if key not in self._messages:
            out.append(("messages/metadata", {key: {"metadata": jsonable(metadata)}}))
            self._messages[key] = message
        elif isinstance(message, BaseMessageChunk):
            self._messages[key] = self._messages[key] + message
        else:
            self._messages[key] = message
        whole = message_chunk_to_message(self._messages[key])
        kind = "messages/partial" if isinstance(message, BaseMessageChunk) else "messages/complete"
        out.append((kind, [jsonable(whole)]))
        return out

    async def follow(self, after: int = 0) -> AsyncIterator[tuple[int, str, Any]]:
        """The events after number ``after`` as ``(number, event, data)``, numbered from 1, as
        they come, until the run has ended."""
        seen = after
        while True:
            self._changed.clear()
            events = self.events()
            while seen < len(events):
                event, data = events[seen]
                seen += 1
                yield seen, event, data
            if self.closed:
                return
            await self._changed.wait()
