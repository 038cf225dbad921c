"""What a delivery writes: its Result's JSON and its audit events.

The per-task ones (started, and the terminal one at commit) are pasted from JSON parts
encoded once per delivery; the rarer ones go through ``audit_event``. The pasting is kept
because it pays: built through ``audit_event`` instead, a task cost the worker 17% more
instructions (``docs/benchmarks.md``, issue 15)."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import orjson
from pydantic_core import to_jsonable_python

from deepagents._internal.ids import uuid7_str
from deepagents.contract.agent import AgentContract
from deepagents.contract.codec import Envelope
from deepagents.contract.events import audit_event
from deepagents.contract.result import NO_METRICS, Result
from deepagents.errors import InvalidResult
from deepagents.transport.base import StreamRef
from deepagents.worker.flight import InFlight


class Encoder:
    def __init__(self, agent: AgentContract, consumer: str) -> None:
        self.agent = agent
        self.consumer = consumer
        self._bases: dict[str, bytes] = {}  # per stream name: a str hashes in C

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

    def event(self, kind: str, flight: InFlight, **fields: Any) -> dict[str, Any]:
        return audit_event(kind, flight.envelope.task.task_id, **self._event_base(flight), **fields)

    def _event_base(self, flight: InFlight) -> dict[str, Any]:
        """The shared fields as a dict, for the rarer events (retried, overdue, ...)."""
        context = flight.context
        if context is None:
            context = self.context(flight.stream, flight.envelope)
        fields = orjson.loads(b"{" + context + b"}")
        del fields["task_id"]  # audit_event takes it on its own
        return {**fields, "deliveries": flight.deliveries}

    def context(self, ref: StreamRef, envelope: Envelope) -> bytes:
        """Every event's fields of this delivery (its task id among them) but its delivery
        count, as JSON object members: encoded once per delivery, pasted into its started
        and terminal events."""
        task = envelope.task
        fixed = self._bases.get(ref.name)
        if fixed is None:  # once per stream: these never change for a worker
            fixed = self._bases[ref.name] = orjson.dumps(
                {
                    "agent": self.agent.name,
                    "agent_version": self.agent.version,
                    "tier": ref.tier,
                    "shard": ref.keys.shard,
                    "consumer": self.consumer,
                }
            )[1:-1]
        context = b'"task_id":%s,%s,"attempt":%d' % (
            orjson.dumps(task.task_id),
            fixed,
            envelope.attempt,
        )
        if task.tenant is not None:
            context += b',"tenant":' + orjson.dumps(task.tenant)
        if task.traceparent is not None:
            context += b',"traceparent":' + orjson.dumps(task.traceparent)
        return context

    @staticmethod
    def started_event(context: bytes, ts: bytes, queue_ms: int) -> bytes:
        """The ``started`` event, written by the begin script as the delivery starts. Its
        JSON stops before the delivery count, which only that script knows and appends.
        ``ts`` is the batch's start time, encoded once for the batch."""
        return b'{"event_id":"%s","type":"started","ts":%s,"queue_ms":%d,%s,"deliveries":' % (
            uuid7_str().encode(),
            ts,
            queue_ms,
            context,
        )

    def commit_events(
        self,
        flight: InFlight,
        kind: str,
        result_json: bytes,
        extra: list[dict[str, Any]],
        now: datetime,
    ) -> bytes:
        """The terminal event of one task, after any the run added (model calls, overdue),
        as a JSON array. Pasted from encoded parts: this is per task."""
        context = flight.context
        if context is None:
            context = self.context(flight.stream, flight.envelope)
        before = orjson.dumps(extra)[1:-1] + b"," if extra else b""
        return b'[%s{"event_id":"%s","type":"%s","ts":%s,"result":%s,%s,"deliveries":%d}]' % (
            before,
            uuid7_str().encode(),
            kind.encode(),
            orjson.dumps(now),  # the result's finished_at
            result_json,
            context,
            flight.deliveries,
        )


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
