"""Harness events -> run events: which are durable, and in which category (seed 003)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stageline.harnesses import HarnessEvent, HarnessEventKind, HarnessResult
from stageline.ledger import EventCategory

__all__ = ["TOOL_KINDS", "classify", "event_level", "fallback_event", "ledger_fields"]

TOOL_KINDS = frozenset(
    {
        HarnessEventKind.TOOL_USE,
        HarnessEventKind.TOOL_RESULT,
        HarnessEventKind.TOOL_SUMMARY,
        HarnessEventKind.USAGE,
        HarnessEventKind.PROVIDER_SESSION,
        HarnessEventKind.WARNING,
        HarnessEventKind.HELPER_AGENT,
    }
)

MESSAGE_LIMIT = 2000
"""Characters of an event's text kept in its ledger message; the transcript keeps it all."""
VALUE_LIMIT = 2000
"""Characters of any one string in an event's ledger data."""


def classify(event: HarnessEvent) -> EventCategory | None:
    """The run event category for a harness event; None for text deltas (live only)."""
    kind = event.kind
    if kind == HarnessEventKind.TEXT_DELTA:
        return None
    if kind == HarnessEventKind.ERROR:
        return EventCategory.ERROR
    if kind in TOOL_KINDS:
        return EventCategory.TOOL
    return EventCategory.OUTPUT


def event_level(event: HarnessEvent) -> str:
    if event.kind == HarnessEventKind.ERROR:
        return "error"
    if event.kind == HarnessEventKind.WARNING:
        return "warning"
    return "info"


def fallback_event(result: HarnessResult) -> HarnessEvent:
    """The one event recorded for a harness that streamed none: its status and output."""
    return HarnessEvent(
        kind=HarnessEventKind.RESULT,
        text=result.output_text or result.summary or str(result.status),
        data={"status": str(result.status), "summary": result.summary, "fallback": True},
    )


def _compact(value: Any) -> Any:
    if isinstance(value, str):
        return value if len(value) <= VALUE_LIMIT else value[:VALUE_LIMIT] + "…"
    if isinstance(value, Mapping):
        return {str(k): _compact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_compact(v) for v in value[:200]]
    return value


def ledger_fields(event: HarnessEvent) -> dict[str, Any]:
    """``kind``, ``level``, ``message`` and ``data`` of the run event for a harness event."""
    text = event.text if len(event.text) <= MESSAGE_LIMIT else event.text[:MESSAGE_LIMIT] + "…"
    return {
        "kind": f"harness.{event.kind}",
        "level": event_level(event),
        "message": text,
        "data": _compact(dict(event.data)),
    }
