"""Audit events: what the runtime appends to a shard's outbox stream.

Each outbox entry has one field, ``events``: a JSON array of event objects. Every event
has a unique ``event_id`` (UUIDv7) so the audit writer can de-duplicate redeliveries.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NamedTuple

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


class AuditEvent(NamedTuple):
    """One audit event, as the runtime hands it to the bus: the transport encodes it
    (``transport/outbox.py``) to the JSON object ``as_object`` gives. ``fields`` are the
    ones its type carries, JSON values (an ``orjson.Fragment`` for JSON already encoded,
    such as a result); ``ts`` is a datetime (UTC) or its ISO text. A NamedTuple, as the
    bus's other per-task records: a delivery builds two or more."""

    type: str
    task_id: str | None
    ts: datetime | str
    fields: dict[str, Any]
    event_id: str

    @classmethod
    def of(
        cls, kind: str, task_id: str | None, *, ts: datetime | str | None = None, **fields: Any
    ) -> AuditEvent:
        """A new event (its own id), at ``ts`` or now; the fields set to None left out."""
        if kind not in EVENT_TYPES:
            raise ValueError(f"unknown audit event type {kind!r}")
        return cls(
            kind,
            task_id,
            ts if ts is not None else datetime.now(UTC),
            {k: v for k, v in fields.items() if v is not None},
            uuid7_str(),
        )

    def as_object(self) -> dict[str, Any]:
        """The event's JSON object: its id, type, task and time, then its fields."""
        return {
            "event_id": self.event_id,
            "type": self.type,
            "task_id": self.task_id,
            "ts": self.ts,
            **self.fields,
        }


def audit_event(kind: str, task_id: str | None, **fields: Any) -> dict[str, Any]:
    """An event's JSON object as the outbox holds it (what the audit store reads)."""
    return AuditEvent.of(kind, task_id, ts=datetime.now(UTC).isoformat(), **fields).as_object()
