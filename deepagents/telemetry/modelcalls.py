"""Model calls into metrics and spans, from the model-call layer's attempt records.

Wiring (in the worker's bootstrap, once the runtime opens ``ModelCalls``)::

    model_calls_scope(models, redis, prefix=..., on_record=ModelCallRecorder(telemetry, agent))

``ModelCalls`` calls the hook once per attempt (or gate refusal) in the caller's context, so
the span lands under the task's ``execute`` span. Only the model name, outcome, token counts,
cost and timings are read: never the prompt (the record holds only its hash anyway).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from deepagents.telemetry.tracing import model_call_span

if TYPE_CHECKING:
    from deepagents.telemetry.core import Telemetry

# Outcomes that say something about the breaker without asking it.
_OPEN = frozenset({"circuit_open"})


class AttemptLike(Protocol):
    """The fields of ``deepagents.modelcall.record.AttemptRecord`` read here."""

    @property
    def model(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def outcome(self) -> str: ...
    @property
    def tokens_in(self) -> int: ...
    @property
    def tokens_out(self) -> int: ...
    @property
    def total_ms(self) -> float | None: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def retries(self) -> int: ...
    @property
    def status_code(self) -> int | None: ...


class ModelCallRecorder:
    """A ``RecordHook`` (``Callable[[AttemptRecord], None]``) for one agent's process."""

    def __init__(self, telemetry: Telemetry, agent: str) -> None:
        self.telemetry = telemetry
        self.agent = agent

    def __call__(self, record: AttemptLike) -> None:
        record_attempt(self.telemetry, record, self.agent)


def record_attempt(telemetry: Telemetry, record: AttemptLike, agent: str) -> None:
    """Metrics and a span for one attempt record. Gate refusals (``attempt == 0``) count as
    calls with their outcome but carry no tokens, latency or span."""
    metrics = telemetry.metrics
    if metrics is not None:
        m = metrics.model
        m.calls.labels(record.model, record.outcome).inc()
        if record.outcome in _OPEN:
            m.circuit_state(record.model, "open")
        elif record.attempt > 0:
            # A request reached the provider, so the breaker let it through (closed or a
            # half-open probe that, answered, closes it).
            m.circuit_state(record.model, "closed")
        if record.attempt > 0:
            retries = m.retries.labels(record.model)  # the series exists (at 0) from the start
            if record.retries:
                retries.inc()
            m.tokens.labels(record.model, "input").inc(record.tokens_in)
            m.tokens.labels(record.model, "output").inc(record.tokens_out)
            m.cost.labels(record.model, agent).inc(record.cost_usd)
            if record.total_ms is not None:
                m.duration.labels(record.model).observe(record.total_ms / 1000)
    if record.attempt > 0:
        model_call_span(
            telemetry.tracing,
            model=record.model,
            attempt=record.attempt,
            outcome=record.outcome,
            duration_s=None if record.total_ms is None else record.total_ms / 1000,
            attributes={
                "gen_ai.usage.input_tokens": record.tokens_in,
                "gen_ai.usage.output_tokens": record.tokens_out,
                "deepagents.agent": agent,
                **({"http.response.status_code": record.status_code} if record.status_code else {}),
            },
        )
