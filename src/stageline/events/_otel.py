"""OpenTelemetry sink: a span per run and per node, built from the run's events.

``run.started`` (or ``resumed``/``retried``) opens the run span; ``node.started`` opens a node
span under it and ``node.succeeded|failed|waiting`` ends it; ``run.succeeded|failed|cancelled|
waiting|drained|rejected`` ends the run span. Spans carry the events' own times, so queueing
does not skew them. Other events (stage logs, gates, harness tools) become span events.

Needs the ``otel`` extra (``pip install 'stageline[otel]'``); this module imports without it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from stageline.ledger.records import Event

__all__ = ["OtelSink"]

_RUN_OPEN = frozenset({"run.started", "run.resumed", "run.retried"})
_RUN_CLOSE = {
    "run.succeeded": "succeeded",
    "run.failed": "failed",
    "run.cancelled": "cancelled",
    "run.waiting": "waiting",
    "run.drained": "drained",
    "run.rejected": "rejected",
    "run.parked": "parked",
    "run.taken_over": "taken_over",
    "run.stopped": "stopped",
}
_NODE_CLOSE = {"node.succeeded": "succeeded", "node.failed": "failed", "node.waiting": "waiting"}
_TOKEN_KEYS = ("input_tokens", "output_tokens")
_COST_KEYS = ("cost", "cost_usd")
_INSTALL = "the otel sink needs OpenTelemetry: pip install 'stageline[otel]'"


def _ns(ts: float) -> int:
    return int(ts * 1e9)


def _usage(metrics: Mapping[str, Any]) -> tuple[float, float, float, float]:
    """(input tokens, output tokens, total tokens, cost) from a node's metrics."""

    def num(key: str) -> float:
        value = metrics.get(key, 0)
        return float(value) if isinstance(value, int | float) else 0.0

    tokens_in, tokens_out = num("input_tokens"), num("output_tokens")
    total = num("total_tokens") or num("tokens") or tokens_in + tokens_out
    return tokens_in, tokens_out, total, sum(num(k) for k in _COST_KEYS)


@dataclass
class _RunSpans:
    span: Any
    template: str
    attempt: int
    tokens: float = 0.0
    cost: float = 0.0
    nodes: dict[tuple[str, int], list[Any]] = field(default_factory=dict)


class OtelSink:
    """Turns events into spans on ``tracer_provider`` (the global one when not given).

    With ``endpoint`` it builds its own SDK provider exporting over OTLP/HTTP, and shuts it
    down on close.
    """

    def __init__(
        self,
        *,
        tracer_provider: Any = None,
        endpoint: str | None = None,
        headers: Mapping[str, str] | None = None,
        service_name: str = "stageline",
        export_timeout: float = 5.0,
        name: str = "otel",
        **future_kwargs: Any,
    ) -> None:
        try:
            import opentelemetry.trace

            if endpoint is not None:
                import opentelemetry.exporter.otlp.proto.http.trace_exporter
                import opentelemetry.sdk.trace  # noqa: F401
        except ImportError as exc:
            raise ImportError(_INSTALL) from exc
        self.name = name
        self._provider = tracer_provider
        self._endpoint = endpoint
        self._headers = dict(headers or {})
        self._service = service_name
        self._export_timeout = export_timeout
        self._owned = False
        self._tracer: Any = None
        self._runs: dict[str, _RunSpans] = {}
        self.secrets: tuple[str, ...] = tuple(self._headers.values())

    def _get_tracer(self) -> Any:
        if self._tracer is None:
            from opentelemetry import trace

            if self._provider is None and self._endpoint is not None:
                self._provider = self._otlp_provider()
                self._owned = True
            provider = self._provider or trace.get_tracer_provider()
            self._tracer = provider.get_tracer("stageline")
        return self._tracer

    def _otlp_provider(self) -> Any:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider = TracerProvider(resource=Resource.create({"service.name": self._service}))
        exporter = OTLPSpanExporter(
            endpoint=self._endpoint, headers=self._headers or None, timeout=self._export_timeout
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return provider

    async def deliver(self, events: Sequence[Event], **future_kwargs: Any) -> None:
        for event in events:
            self.handle(event)

    def handle(self, event: Event) -> None:
        kind = event.kind
        if kind in _RUN_OPEN:
            self._open_run(event)
        elif kind == "node.started":
            self._open_node(event)
        elif kind in _NODE_CLOSE:
            self._close_node(event, _NODE_CLOSE[kind])
        elif kind in _RUN_CLOSE:
            self._close_run(event, _RUN_CLOSE[kind])
        else:
            self._annotate(event)

    # -- runs -------------------------------------------------------------------------------

    def _open_run(self, event: Event) -> _RunSpans:
        stale = self._runs.pop(event.run_id, None)
        if stale is not None:
            self._end_run(stale, event.ts, "superseded", error=None)
        template = str(event.data.get("template", "") or "")
        attempt = _int(event.data.get("attempt"), 1)
        span = self._get_tracer().start_span(
            f"run {template}".strip(),
            start_time=_ns(event.ts),
            attributes={
                "stageline.run_id": event.run_id,
                "stageline.template": template,
                "stageline.template_version": str(event.data.get("version", "")),
                "stageline.attempt": attempt,
                "stageline.opened_by": event.kind,
            },
        )
        spans = self._runs[event.run_id] = _RunSpans(span, template, attempt)
        return spans

    def _run(self, event: Event) -> _RunSpans:
        """The run's open spans; a run first seen mid-way (its start went elsewhere) gets one."""
        return self._runs.get(event.run_id) or self._open_run(event)

    def _close_run(self, event: Event, status: str) -> None:
        spans = self._runs.pop(event.run_id, None)
        if spans is None:
            return
        error = (event.message or status) if status == "failed" else None
        if event.data.get("failure_phase"):
            spans.span.set_attribute("stageline.failure_phase", str(event.data["failure_phase"]))
        self._end_run(spans, event.ts, status, error=error)

    def _end_run(self, spans: _RunSpans, ts: float, status: str, *, error: str | None) -> None:
        for stack in spans.nodes.values():  # nodes the run left without an outcome
            for span in stack:
                self._finish(span, ts, "unfinished", None)
        spans.span.set_attribute("stageline.tokens", spans.tokens)
        spans.span.set_attribute("stageline.cost", spans.cost)
        self._finish(spans.span, ts, status, error)

    # -- nodes ------------------------------------------------------------------------------

    def _open_node(self, event: Event) -> None:
        from opentelemetry import trace

        spans = self._run(event)
        node = event.node or "?"
        tried = _int(event.data.get("try"), 1)
        span = self._get_tracer().start_span(
            f"node {node}",
            context=trace.set_span_in_context(spans.span),
            start_time=_ns(event.ts),
            attributes={
                "stageline.run_id": event.run_id,
                "stageline.template": spans.template,
                "stageline.node": node,
                "stageline.attempt": _int(event.data.get("attempt"), spans.attempt),
                "stageline.try": tried,
            },
        )
        spans.nodes.setdefault((node, tried), []).append(span)

    def _close_node(self, event: Event, status: str) -> None:
        spans = self._runs.get(event.run_id)
        node = event.node or "?"
        stack = spans.nodes.get((node, _int(event.data.get("try"), 1))) if spans else None
        if spans is None or not stack:
            return
        span = stack.pop(0)  # fan-out runs one node as several tasks: first started, first ended
        if not stack:
            del spans.nodes[(node, _int(event.data.get("try"), 1))]
        metrics = event.data.get("metrics") or {}
        metrics = metrics if isinstance(metrics, Mapping) else {}
        tokens_in, tokens_out, total, cost = _usage(metrics)
        spans.tokens += total
        spans.cost += cost
        attributes: dict[str, Any] = {"stageline.tokens": total, "stageline.cost": cost}
        if tokens_in or tokens_out:
            attributes |= {
                "stageline.tokens.input": tokens_in,
                "stageline.tokens.output": tokens_out,
                "gen_ai.usage.input_tokens": int(tokens_in),
                "gen_ai.usage.output_tokens": int(tokens_out),
            }
        for key, value in metrics.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                attributes[f"stageline.metric.{key}"] = value
        if isinstance(event.data.get("duration"), int | float):
            attributes["stageline.duration"] = float(event.data["duration"])
        if event.data.get("failure_phase"):
            attributes["stageline.failure_phase"] = str(event.data["failure_phase"])
        span.set_attributes(attributes)
        self._finish(
            span, event.ts, status, (event.message or status) if status == "failed" else None
        )

    # -- everything else --------------------------------------------------------------------

    def _annotate(self, event: Event) -> None:
        spans = self._runs.get(event.run_id)
        if spans is None:
            return
        target = spans.span
        if event.node:
            for (node, _), stack in spans.nodes.items():
                if node == event.node and stack:
                    target = stack[-1]
        attributes = {
            "stageline.seq": event.seq,
            "stageline.level": event.level,
            "stageline.category": str(event.category),
        }
        if event.message:
            attributes["stageline.message"] = event.message
        if event.data:
            attributes["stageline.data"] = json.dumps(dict(event.data), default=str)[:4000]
        target.add_event(event.kind, attributes=attributes, timestamp=_ns(event.ts))

    def _finish(self, span: Any, ts: float, status: str, error: str | None) -> None:
        from opentelemetry.trace import Status, StatusCode

        span.set_attribute("stageline.status", status)
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error[:500]))
        elif status in ("succeeded", "waiting"):
            span.set_status(Status(StatusCode.OK))
        span.end(end_time=_ns(ts))

    async def aclose(self, **future_kwargs: Any) -> None:
        import asyncio

        for spans in list(self._runs.values()):  # still open when the process ends
            spans.span.set_attribute("stageline.status", "open")
            spans.span.end()
        self._runs.clear()
        provider = self._provider
        if self._owned and provider is not None:
            await asyncio.to_thread(provider.shutdown)
        elif provider is not None and hasattr(provider, "force_flush"):
            await asyncio.to_thread(provider.force_flush, int(self._export_timeout * 1000))


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default
