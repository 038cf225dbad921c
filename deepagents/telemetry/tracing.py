"""OpenTelemetry tracing: one trace from the submitter, through the stream, to the model call.

The orchestrator starts a PRODUCER span per task and writes its W3C ``traceparent`` into the
task, which travels inside the stream message; the worker continues it (a CONSUMER span and
one span per contract method) and model-call attempts hang below ``execute``.

Cost: without an SDK provider (no exporter configured and none installed by the host
application) ``Tracing.tracer`` is None and the hot path does nothing but, for a task that
carries a traceparent, attach that context (so log lines still carry the trace id).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from deepagents._internal.extras import require_extra
from deepagents.config.settings import Settings

log = logging.getLogger("deepagents.telemetry")

TRACER_NAME = "deepagents"
_PROPAGATOR = TraceContextTextMapPropagator()


class Tracing:
    """The tracer of one process (or one test): ``tracer`` is None when nothing records."""

    def __init__(self, provider: trace.TracerProvider | None = None) -> None:
        self.provider = provider
        self.tracer: Tracer | None = provider.get_tracer(TRACER_NAME) if provider else None

    @classmethod
    def from_global(cls) -> Tracing:
        """Use the host application's SDK provider if it installed one; else record nothing."""
        provider = trace.get_tracer_provider()
        return cls(provider if isinstance(provider, TracerProvider) else None)

    @property
    def recording(self) -> bool:
        return self.tracer is not None

    def shutdown(self) -> None:
        if isinstance(self.provider, TracerProvider):
            self.provider.shutdown()


def extract(traceparent: str | None) -> Context | None:
    """The remote parent context carried by a task, or None."""
    if not traceparent:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def traceparent_of(span: Span) -> str | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, trace.set_span_in_context(span))
    return carrier.get("traceparent")


def current_ids() -> tuple[str, str] | None:
    """(trace id, span id) of the current context in hex, for log lines; None outside a trace."""
    ctx = trace.get_current_span().get_span_context()
    if not ctx.is_valid:
        return None
    return format(ctx.trace_id, "032x"), format(ctx.span_id, "016x")


@contextlib.contextmanager
def attached(ctx: Context | None) -> Iterator[None]:
    if ctx is None:
        yield
        return
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def producer_span(tracing: Tracing, agent: str, tier: str, parent: Context | None) -> Span | None:
    """A PRODUCER span for one task; the caller ends it once the task is enqueued."""
    if tracing.tracer is None:
        return None
    return tracing.tracer.start_span(
        f"submit {agent}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "redis_streams",
            "messaging.operation.type": "send",
            "deepagents.agent": agent,
            "deepagents.tier": tier,
        },
    )


def model_call_span(
    tracing: Tracing,
    *,
    model: str,
    attempt: int,
    outcome: str,
    duration_s: float | None,
    attributes: dict[str, Any] | None = None,
) -> None:
    """Record one finished model-call attempt as a CLIENT span under the current span.

    For callers that learn of an attempt after it ended (the attempt record hook): the span
    is back-dated by its duration. Code that wraps the attempt itself can instead use
    ``tracing.tracer.start_as_current_span`` directly.
    """
    if tracing.tracer is None:
        return
    end = time.time_ns()
    start = end - int((duration_s or 0.0) * 1e9)
    span = tracing.tracer.start_span(
        f"model_call {model}",
        kind=SpanKind.CLIENT,
        start_time=start,
        attributes={
            "gen_ai.request.model": model,
            "deepagents.model.attempt": attempt,
            "deepagents.model.outcome": outcome,
            **(attributes or {}),
        },
    )
    if outcome != "ok":
        span.set_status(trace.Status(trace.StatusCode.ERROR, outcome))
    span.end(end_time=end)


# setup ---------------------------------------------------------------------------------


def setup_tracing(settings: Settings, service: str) -> Tracing:
    """A provider with the exporters the settings ask for; none asked: nothing records."""
    processors: list[SpanProcessor] = []
    if settings.otlp_endpoint:
        processors.append(BatchSpanProcessor(_otlp_exporter(settings.otlp_endpoint)))
    if settings.trace_file is not None:
        processors.append(SimpleSpanProcessor(JsonLinesSpanExporter(settings.trace_file)))
    if not settings.tracing or not processors:
        return Tracing.from_global() if settings.tracing else Tracing(None)
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    for processor in processors:
        provider.add_span_processor(processor)
    return Tracing(provider)


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
