"""The OpenTelemetry SDK's side of tracing: a provider with the exporters the settings ask
for (OTLP over HTTP, or JSON lines in a file). Imported only when one is configured
(``tracing.setup_tracing``): the SDK's import is a start-up cost every worker would
otherwise pay."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)

from deepagents._internal.extras import require_extra
from deepagents.config.settings import Settings


def exporting_provider(settings: Settings, service: str) -> TracerProvider:
    """An SDK provider exporting to what ``settings`` name (at least one of them)."""
    processors: list[SpanProcessor] = []
    if settings.otlp_endpoint:
        processors.append(BatchSpanProcessor(_otlp_exporter(settings.otlp_endpoint)))
    if settings.trace_file is not None:
        processors.append(SimpleSpanProcessor(JsonLinesSpanExporter(settings.trace_file)))
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider


def _otlp_exporter(endpoint: str) -> SpanExporter:
    # Imported only when configured: the OTLP stack (protobuf) costs start-up time, and it is
    # an extra.
    require_extra("otlp", "DEEPAGENTS_OTLP_ENDPOINT")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(endpoint=endpoint)


class JsonLinesSpanExporter(SpanExporter):
    """Finished spans as JSON lines (append), with the process id: lets a test assemble a
    trace from several processes, each with its own in-process SDK."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = b"".join(orjson.dumps(span_dict(s)) + b"\n" for s in spans)
        with self.path.open("ab") as f:
            f.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def span_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(ctx.trace_id, "032x"),
        "span_id": format(ctx.span_id, "016x"),
        "parent_id": format(span.parent.span_id, "016x") if span.parent else None,
        "start_ns": span.start_time,
        "end_ns": span.end_time,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "pid": os.getpid(),
    }
