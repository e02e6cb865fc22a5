"""The event bus: the ledger's publisher hands it committed events; it hands them to sinks.

Two kinds of sink, told apart by what they implement:

- a ``Sink`` (``emit``) is called inline, in ``seq`` order, for cheap in-process work such as
  a terminal line or a test's recording; it must not block, and what it raises is counted;
- an ``AsyncSink`` (``deliver``, ``aclose``) does I/O: it gets a bounded queue and a worker
  task of its own (``Delivery``), so a slow or broken endpoint never reaches the run.

Every event is redacted once before any sink sees it (``Redactor``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from stageline.events._config import build_sinks
from stageline.events._delivery import AsyncSink, Delivery, DeliveryPolicy, DeliveryStats
from stageline.events._filters import ACCEPT_ALL, EventFilter
from stageline.events._redact import Redactor
from stageline.events._sink import Sink, SinkSpec
from stageline.ledger.records import Event

__all__ = ["CLOSE_TIMEOUT", "EventBus"]

_log = logging.getLogger("stageline.events")

CLOSE_TIMEOUT = 5.0
"""Seconds ``EventBus.aclose`` waits by default for queued events before it drops them."""


@dataclass(frozen=True)
class _Inline:
    sink: Sink
    filter: EventFilter


class EventBus:
    """Publishes committed events to sinks; a failing sink is logged and counted, never raised."""

    def __init__(
        self, sinks: Iterable[Sink | AsyncSink | SinkSpec] = (), *, redactor: Redactor | None = None
    ) -> None:
        self.redactor = redactor or Redactor()
        self._inline: list[_Inline] = []
        self.deliveries: list[Delivery] = []
        self._inline_failures = 0
        for sink in sinks:
            self.add(sink)

    @classmethod
    def configured(
        cls,
        entries: Iterable[Mapping[str, Any]] = (),
        sinks: Iterable[Sink | AsyncSink | SinkSpec] = (),
        *,
        env: Mapping[str, str] | None = None,
        which: str = "all",
    ) -> EventBus:
        """A bus with the sinks of ``[[sinks]]`` entries (``Settings.sinks``; ``which`` as
        ``build_sinks`` takes it) and ``sinks``."""
        return cls([*build_sinks(entries, env=env, which=which), *sinks])

    @property
    def sinks(self) -> list[Sink | AsyncSink]:
        return [i.sink for i in self._inline] + [d.sink for d in self.deliveries]

    def add(
        self,
        sink: Sink | AsyncSink | SinkSpec,
        *,
        filter: EventFilter | None = None,
        policy: DeliveryPolicy | None = None,
    ) -> None:
        """Register a sink: an ``AsyncSink`` gets a queue and a worker, a ``Sink`` is inline."""
        if isinstance(sink, SinkSpec):
            self.redactor.add(*sink.secrets)
            filter, policy, sink = filter or sink.filter, policy or sink.policy, sink.sink
        for secret in getattr(sink, "secrets", ()):
            self.redactor.add(secret)
        if isinstance(sink, AsyncSink):
            delivery = Delivery(sink, filter=filter or ACCEPT_ALL, policy=policy)
            taken = {d.name for d in self.deliveries}
            base, number = delivery.name, 2
            while delivery.name in taken:  # two webhooks to one host: keep their stats apart
                delivery.name, number = f"{base}#{number}", number + 1
            self.deliveries.append(delivery)
        elif callable(getattr(sink, "emit", None)):
            self._inline.append(_Inline(sink, filter or ACCEPT_ALL))
        else:
            raise TypeError(f"{type(sink).__name__} is not a sink: it has neither emit nor deliver")

    def publish(self, events: list[Event]) -> None:
        """Hand committed events to every sink; returns at once, whatever the sinks do."""
        if not self._inline and not self.deliveries:
            return
        for raw in events:
            event = self.redactor.event(raw)
            for inline in self._inline:
                if not inline.filter.accepts(event):
                    continue
                try:
                    inline.sink.emit(event)
                except Exception:
                    self._inline_failures += 1
                    _log.debug("sink %s failed on %s", type(inline.sink).__name__, event.kind)
            for delivery in self.deliveries:
                delivery.offer(event)

    @property
    def failures(self) -> int:
        """Failed calls of inline sinks plus failed delivery attempts of queued ones."""
        return self._inline_failures + sum(d.stats.failures for d in self.deliveries)

    def stats(self) -> dict[str, DeliveryStats]:
        """Each queued sink's counters, by sink name."""
        return {d.name: d.stats for d in self.deliveries}

    async def flush(self, timeout: float = CLOSE_TIMEOUT) -> bool:
        """Wait until every queue is empty (delivered or given up); False on timeout."""
        done = await asyncio.gather(*(d.flush(timeout) for d in self.deliveries))
        return all(done)

    async def aclose(self, timeout: float = CLOSE_TIMEOUT) -> None:
        """Deliver what is queued within ``timeout`` (all sinks at once), drop what is left,
        and close the queued sinks. Events published afterwards are dropped and counted."""
        if self.deliveries:
            await asyncio.gather(*(d.aclose(timeout) for d in self.deliveries))
