"""Events after the ledger: a bus that hands committed events to sinks."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Protocol

from stageline.ledger.records import Event

__all__ = ["EventBus", "Sink"]

_log = logging.getLogger("stageline.events")


class Sink(Protocol):
    """Somewhere events go besides the ledger; it must never raise into a run."""

    def emit(self, event: Event, **future_kwargs: Any) -> None: ...


class EventBus:
    """Publishes committed events to sinks; a failing sink is logged and counted, never raised."""

    def __init__(self, sinks: Iterable[Sink] = ()) -> None:
        self.sinks: list[Sink] = list(sinks)
        self.failures = 0

    def add(self, sink: Sink) -> None:
        self.sinks.append(sink)

    def publish(self, events: list[Event]) -> None:
        for event in events:
            for sink in self.sinks:
                try:
                    sink.emit(event)
                except Exception:
                    self.failures += 1
                    _log.debug("sink %r failed on %s", sink, event.kind, exc_info=True)
