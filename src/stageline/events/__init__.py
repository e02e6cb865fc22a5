"""Events after the ledger: a bus that hands committed events to sinks, and an outbox.

The ledger numbers each run's events (``seq`` 1, 2, 3... with no gap) and commits them; then
its publisher calls ``EventBus.publish``. From there each event is redacted once and goes to
inline sinks (``Sink.emit``: the terminal, a test's recording) and to queued sinks given in
code (``AsyncSink.deliver``), each behind its own bounded queue, filter and retry policy.

Sinks of ``[[sinks]]`` in stageline.toml that do I/O (webhooks, Telegram, OpenTelemetry) are
delivered from the ledger itself by a ``Deliverer``, with a cursor per sink and run (an
outbox): nothing is lost when a process exits, and the next process carries on. New types
are added with ``register_sink_type``.
"""

from __future__ import annotations

from stageline.events._bus import CLOSE_TIMEOUT, EventBus
from stageline.events._config import SinkFactory, SinkOptions, build_sinks, register_sink_type
from stageline.events._console import ConsoleSink
from stageline.events._delivery import AsyncSink, DeliveryError, DeliveryPolicy, DeliveryStats
from stageline.events._filters import LEVELS, EventFilter
from stageline.events._otel import OtelSink
from stageline.events._outbox import EXIT_TIMEOUT, Deliverer
from stageline.events._redact import Redactor
from stageline.events._sink import Sink, SinkSpec
from stageline.events._telegram import CRITICAL_KINDS, TelegramSink
from stageline.events._webhook import WebhookSink, sign_payload, verify_signature

__all__ = [
    "CLOSE_TIMEOUT",
    "CRITICAL_KINDS",
    "EXIT_TIMEOUT",
    "LEVELS",
    "AsyncSink",
    "ConsoleSink",
    "Deliverer",
    "DeliveryError",
    "DeliveryPolicy",
    "DeliveryStats",
    "EventBus",
    "EventFilter",
    "OtelSink",
    "Redactor",
    "Sink",
    "SinkFactory",
    "SinkOptions",
    "SinkSpec",
    "TelegramSink",
    "WebhookSink",
    "build_sinks",
    "register_sink_type",
    "sign_payload",
    "verify_signature",
]
