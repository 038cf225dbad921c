"""What a delivery writes: its Result's JSON and its audit events (as ``AuditEvent``
objects: the bus encodes them, ``transport/outbox.py``). Every event of a delivery shares
its context's fields, made once per delivery."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import orjson
from pydantic_core import to_jsonable_python

from deepagents._internal.ids import uuid7_str
from deepagents.contract.agent import AgentContract
from deepagents.contract.codec import Envelope
from deepagents.contract.events import AuditEvent
from deepagents.contract.result import NO_METRICS, Result
from deepagents.errors import InvalidResult
from deepagents.transport.base import StreamRef
from deepagents.worker.flight import InFlight


class Encoder:
    def __init__(self, agent: AgentContract, consumer: str) -> None:
        self.agent = agent
        self.consumer = consumer
        self._bases: dict[str, dict[str, Any]] = {}  # per stream name

    def result_json(
        self, flight: InFlight, result: Result, started: float, queue_ms: int, now: datetime
    ) -> bytes:
        """The committed Result as JSON with the runtime's fields filled in. Written directly
        rather than through a new model: every value is valid already, and this is per task."""
        own = result.metrics
        # Truncated to the µs: round(x, 3) formats the float, a cost per task.
        latency_ms = int((time.monotonic() - started) * 1_000_000) / 1000
        if flight.first_ms:  # begun before: from its first start, across its deliveries
            latency_ms, queue_ms = _since_first(flight, queue_ms, now)
        if own is NO_METRICS:  # most results: the agent set none, nothing to merge
            metrics = {
                "latency_ms": latency_ms,
                "queue_ms": queue_ms,
                "tokens_used": 0,
                "cost_usd": 0.0,
                "attempts": flight.deliveries,
            }
        else:
            merged = {
                **own.__dict__,
                **(own.__pydantic_extra__ or {}),
                "latency_ms": latency_ms,
                "queue_ms": queue_ms,
                "attempts": flight.deliveries,
            }
            metrics = {k: v for k, v in merged.items() if v is not None}
        body: dict[str, Any] = {
            "task_id": flight.envelope.task.task_id,
            "status": result.status,  # a StrEnum: orjson writes its value
            "degraded": result.degraded,
            "metrics": metrics,
            "agent": self.agent.name,
            "agent_version": self.agent.version,
            "finished_at": now,
        }
        if result.output is not None:
            body["output"] = result.output
        if result.error is not None:
            body["error"] = {"code": result.error.code, "message": result.error.message}
        try:
            return orjson.dumps(body, default=to_jsonable_python)
        except orjson.JSONEncodeError as exc:  # names the type, never the value
            raise InvalidResult.caused_by("the result is not JSON", exc) from None

    def event(self, kind: str, flight: InFlight, **fields: Any) -> AuditEvent:
        """A rarer event of this delivery (retried, overdue, ...), with the shared fields."""
        return AuditEvent.of(
            kind,
            flight.envelope.task.task_id,
            **self._shared(flight),
            deliveries=flight.deliveries,
            **fields,
        )

    def _shared(self, flight: InFlight) -> dict[str, Any]:
        if flight.context is None:
            flight.context = self.context(flight.stream, flight.envelope)
        return flight.context

    def context(self, ref: StreamRef, envelope: Envelope) -> dict[str, Any]:
        """Every event's fields of this delivery but its task id and delivery count: made
        once per delivery, shared by its events."""
        task = envelope.task
        fixed = self._bases.get(ref.name)
        if fixed is None:  # once per stream: these never change for a worker
            fixed = self._bases[ref.name] = {
                "agent": self.agent.name,
                "agent_version": self.agent.version,
                "tier": ref.tier,
                "shard": ref.keys.shard,
                "consumer": self.consumer,
            }
        context: dict[str, Any] = {**fixed, "attempt": envelope.attempt}
        if task.tenant is not None:
            context["tenant"] = task.tenant
        if task.traceparent is not None:
            context["traceparent"] = task.traceparent
        return context

    @staticmethod
    def started_event(
        task_id: str, context: dict[str, Any], now: datetime, queue_ms: int
    ) -> AuditEvent:
        """The ``started`` event, without its delivery count: the bus adds it as it counts
        the delivery. ``now`` is the batch's start time."""
        return AuditEvent("started", task_id, now, {"queue_ms": queue_ms, **context}, uuid7_str())

    def commit_events(
        self,
        flight: InFlight,
        kind: str,
        result_json: bytes,
        extra: list[AuditEvent],
        now: datetime,
    ) -> list[AuditEvent]:
        """The terminal event of one task (at ``now``, its result's finished_at), after any
        the run added (model calls, overdue)."""
        fields = {
            "result": orjson.Fragment(result_json),
            **self._shared(flight),
            "deliveries": flight.deliveries,
        }
        return [*extra, AuditEvent(kind, flight.envelope.task.task_id, now, fields, uuid7_str())]


def _since_first(flight: InFlight, queue_ms: int, now: datetime) -> tuple[float, int]:
    """A task begun before: its latency runs from its first start (wall clock: that start
    was on another worker, perhaps), and its queue time is the wait before that start when
    this delivery's entry is the one it first began from (a redelivery; a retry's entry was
    enqueued after it, so its own wait stands)."""
    first = flight.first_ms
    latency_ms = float(max(0, int(now.timestamp() * 1000) - first))
    enqueued = int(flight.started_at.timestamp() * 1000) - queue_ms
    if enqueued <= first:
        queue_ms = first - enqueued
    return latency_ms, queue_ms
