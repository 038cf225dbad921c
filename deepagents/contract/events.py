"""Audit events: what the runtime appends to a shard's outbox stream.

Each outbox entry has one field, ``events``: a JSON array of event objects. Every event
has a unique ``event_id`` (UUIDv7) so the audit writer can de-duplicate redeliveries.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson

from deepagents._internal.ids import uuid7_str

EVENT_TYPES = frozenset(
    {
        "submitted",
        "started",
        "succeeded",
        "failed",
        "retried",
        "waited",  # an open circuit: rescheduled, the delivery not counted
        "dead_lettered",
        "dropped",
        "expired",
        "degraded",
        "overdue",
        "replayed",
        "payload_lost",
        "model_call",
        "rollout",  # a rollout's decision (controller or operator) with its figures
        # waiting for a person: parked, answered, its wait ran out, escalated
        "waiting",
        "replied",
        "wait_expired",
        "escalated",
        "step_completed",
        "resumed",
        "tool_call",  # one call through wrap_tool_call: tool, server, arguments hash, outcome
        # delegation: a parent parked for its children; a child's end recorded on it
        "waiting_children",
        "child_ended",
    }
)


def audit_event(kind: str, task_id: str | None, **fields: Any) -> dict[str, Any]:
    if kind not in EVENT_TYPES:
        raise ValueError(f"unknown audit event type {kind!r}")
    event = {
        "event_id": uuid7_str(),
        "type": kind,
        "task_id": task_id,
        "ts": datetime.now(UTC).isoformat(),
    }
    event.update({k: v for k, v in fields.items() if v is not None})
    return event


def encode_events(events: list[dict[str, Any]]) -> bytes:
    """JSON array; a value may be an ``orjson.Fragment`` (already-encoded JSON, e.g. a result)."""
    return orjson.dumps(events) if events else b""
