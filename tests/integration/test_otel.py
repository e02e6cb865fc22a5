"""OpenTelemetry spans from real runs, read back with the SDK's in-memory exporter; and the
OTLP/HTTP exporter of the ``otel`` extra posting to a loopback collector."""

from __future__ import annotations

import asyncio
import operator
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

from stageline.config import Settings, with_overrides
from stageline.events import OtelSink
from stageline.ledger import RunStatus
from stageline.runner import Runner
from stageline.stages import StageContext
from stageline.templates import Template


class S(TypedDict, total=False):
    n: int
    trail: Annotated[list[str], operator.add]


def step(name: str, *, fail: bool = False) -> Any:
    async def body(state: S, ctx: StageContext) -> dict[str, Any]:
        await asyncio.sleep(0.005)
        ctx.metric("input_tokens", 100)
        ctx.metric("output_tokens", 20)
        ctx.metric("cost", 0.25)
        ctx.log.info(f"{name} working")
        if fail:
            raise RuntimeError(f"{name} broke")
        return {"n": state.get("n", 0) + 1, "trail": [name]}

    body.__name__ = body.__qualname__ = name
    return body


def template(name: str, nodes: list[str], fail: str | None = None) -> Template:
    made = Template(name, state=S, version="7")
    for node in nodes:
        made.add_stage(node, step(node, fail=node == fail))
    return made.add_sequence(*nodes)


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(exporter))
    yield made
    made.shutdown()


def by_name(spans: tuple[ReadableSpan, ...], run_id: str) -> dict[str, ReadableSpan]:
    mine = [s for s in spans if (s.attributes or {}).get("stageline.run_id") == run_id]
    return {s.name: s for s in mine}


@pytest.mark.parametrize("backend", ["sqlite", "memory"])
async def test_a_span_per_node_parented_to_the_run_span(
    backend: str,
    sqlite_settings: Settings,
    memory_settings: Settings,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    settings = sqlite_settings if backend == "sqlite" else memory_settings
    nodes = ["research", "outline", "draft"]
    async with Runner.open(settings, sinks=(OtelSink(tracer_provider=provider),)) as runner:
        summary = await runner.start(template("blog", nodes), {})
        assert summary.status is RunStatus.SUCCEEDED
    run_id = summary.run.run_id
    spans = by_name(exporter.get_finished_spans(), run_id)
    assert sorted(spans) == sorted(["run blog", *(f"node {n}" for n in nodes)])
    run = spans["run blog"]
    assert run.parent is None
    assert run.status.status_code is StatusCode.OK
    assert run.attributes is not None
    assert run.attributes["stageline.template"] == "blog"
    assert run.attributes["stageline.template_version"] == summary.run.template_version
    assert run.attributes["stageline.attempt"] == 1
    assert run.attributes["stageline.status"] == "succeeded"
    assert run.attributes["stageline.tokens"] == 3 * 120
    assert run.attributes["stageline.cost"] == pytest.approx(0.75)
    for node in nodes:
        span = spans[f"node {node}"]
        assert span.parent is not None and run.context is not None and span.context is not None
        assert span.parent.span_id == run.context.span_id
        assert span.context.trace_id == run.context.trace_id
        attrs = span.attributes or {}
        assert attrs["stageline.template"] == "blog"
        assert attrs["stageline.node"] == node
        assert attrs["stageline.attempt"] == 1
        assert attrs["stageline.try"] == 1
        assert attrs["stageline.status"] == "succeeded"
        assert attrs["stageline.tokens"] == 120
        assert attrs["stageline.tokens.input"] == 100
        assert attrs["gen_ai.usage.output_tokens"] == 20
        assert attrs["stageline.cost"] == 0.25
        assert attrs["stageline.duration"] > 0
        assert span.status.status_code is StatusCode.OK
        assert [e.name for e in span.events] == ["stage.log"]  # the stage's log line
        assert run.start_time is not None and span.start_time is not None
        assert span.end_time is not None and run.end_time is not None
        assert run.start_time <= span.start_time <= span.end_time <= run.end_time
    starts = [spans[f"node {n}"].start_time or 0 for n in nodes]
    assert starts == sorted(starts)


async def test_a_failed_node_and_run_are_error_spans(
    memory_settings: Settings,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    async with Runner.open(memory_settings, sinks=(OtelSink(tracer_provider=provider),)) as runner:
        summary = await runner.start(template("flaky", ["a", "b", "c"], fail="b"), {})
        assert summary.status is RunStatus.FAILED
        retried = await runner.retry(summary.run.run_id)  # b still fails: attempt 2
        assert retried.status is RunStatus.FAILED
    spans = [
        s
        for s in exporter.get_finished_spans()
        if (s.attributes or {}).get("stageline.run_id") == summary.run.run_id
    ]
    runs = [s for s in spans if s.name == "run flaky"]
    assert [(s.attributes or {})["stageline.attempt"] for s in runs] == [1, 2]
    for run in runs:
        assert run.status.status_code is StatusCode.ERROR
        assert (run.attributes or {})["stageline.failure_phase"] == "stage"
    failed = [s for s in spans if s.name == "node b"]
    assert len(failed) == 2
    assert all(s.status.status_code is StatusCode.ERROR for s in failed)
    assert all("b broke" in (s.status.description or "") for s in failed)
    assert [(s.attributes or {})["stageline.attempt"] for s in failed] == [1, 2]
    assert [s.parent.span_id if s.parent else None for s in failed] == [
        r.context.span_id if r.context else None for r in runs
    ]
    assert not [s for s in spans if s.name == "node c"]


class Collector:
    """A loopback OTLP/HTTP collector: records the path and content type of each export."""

    def __init__(self) -> None:
        self.received: list[tuple[str, str, int]] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", 0))
                self.rfile.read(size)
                collector.received.append((self.path, self.headers["Content-Type"], size))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def endpoint(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1/traces"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


async def test_the_otel_sink_from_toml_exports_over_otlp_http(memory_settings: Settings) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    collector = Collector()
    try:
        settings = with_overrides(
            memory_settings,
            sinks=(
                {
                    "type": "otel",
                    "endpoint": collector.endpoint,
                    "service_name": "stageline-test",
                    "headers": {"x-api-key": "otel-header-secret"},
                },
            ),
        )
        async with Runner.open(settings) as runner:
            summary = await runner.start(template("otlp", ["a", "b"]), {})
            assert summary.status is RunStatus.SUCCEEDED
        # closing the runner shut the sink's own provider down, which flushed its batch
    finally:
        collector.close()
    assert collector.received
    path, content_type, size = collector.received[0]
    assert (path, content_type) == ("/v1/traces", "application/x-protobuf") and size > 0
