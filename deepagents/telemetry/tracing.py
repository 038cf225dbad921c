"""OpenTelemetry tracing: one trace from the submitter, through the stream, to the model call.

The orchestrator starts a PRODUCER span per task and writes its W3C ``traceparent`` into the
task, which travels inside the stream message; the worker continues it (a CONSUMER span and
one span per contract method) and model-call attempts hang below ``execute``.

Cost: without an SDK provider (no exporter configured and none installed by the host
application) ``Tracing.tracer`` is None and the hot path does nothing but, for a task that
carries a traceparent, attach that context (so log lines still carry the trace id). This
module needs only the OpenTelemetry API: the SDK (its provider, processors and exporters,
``span_export``) is imported when the settings ask for an exporter, so a worker that
exports no spans does not pay for its import at start-up.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

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
        return cls(provider if _is_sdk_provider(provider) else None)

    @property
    def recording(self) -> bool:
        return self.tracer is not None

    def shutdown(self) -> None:
        if self.provider is not None and _is_sdk_provider(self.provider):
            self.provider.shutdown()  # type: ignore[attr-defined]


def _is_sdk_provider(provider: trace.TracerProvider) -> bool:
    """Whether ``provider`` is the SDK's, without importing the SDK: a process holding one
    has imported its module, and a process that has not imported it holds none."""
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    return sdk is not None and isinstance(provider, sdk.TracerProvider)


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
    """A provider with the exporters the settings ask for; none asked: the host
    application's provider if it installed one; tracing off: nothing records."""
    if not settings.tracing:
        return Tracing(None)
    if not settings.otlp_endpoint and settings.trace_file is None:
        return Tracing.from_global()
    from deepagents.telemetry.span_export import exporting_provider

    return Tracing(exporting_provider(settings, service))
