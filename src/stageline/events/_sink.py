"""What a sink is: the inline ``Sink`` protocol, and ``SinkSpec``, a sink with the events it
wants and how they are delivered (``AsyncSink``, the queued kind, is in ``_delivery``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from stageline.events._delivery import AsyncSink, DeliveryPolicy
from stageline.events._filters import ACCEPT_ALL, EventFilter
from stageline.ledger.records import Event

__all__ = ["Sink", "SinkSpec"]


class Sink(Protocol):
    """Somewhere events go besides the ledger, called inline; it must never raise into a run."""

    def emit(self, event: Event, **future_kwargs: Any) -> None: ...


@dataclass(frozen=True, kw_only=True)
class SinkSpec:
    """A sink with the events it wants and, for an ``AsyncSink``, its delivery policy."""

    sink: Sink | AsyncSink
    filter: EventFilter = ACCEPT_ALL
    policy: DeliveryPolicy | None = None
    secrets: tuple[str, ...] = ()
    """Values (a signing secret, a webhook URL) to mask wherever they appear in events."""
    sink_id: str | None = None
    """The sink's stable id in the ledger's outbox (sinks of ``[[sinks]]``)."""
    give_up_after: int | None = None
    """Outbox only: failed retries after which a batch is given up (None: never)."""
