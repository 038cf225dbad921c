"""Audit events as a shard's outbox holds them: one encoder, used by every backend.

An outbox entry's ``events`` field is a JSON array of event objects
(``contract/events.py``). Callers hand the bus ``AuditEvent`` objects; only this module
turns them into bytes, so the format the audit store, the console and the webhooks read
is written in one place.

The fields a delivery's events share (``EventContext``) are encoded once per delivery and
pasted into each of its events, rather than merged into each event's object and encoded
again: the worker spent about 9% more instructions per task that way
(``docs/benchmarks.md``)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from deepagents.contract.events import AuditEvent, EventContext


def encode_events(events: Sequence[AuditEvent]) -> bytes:
    """The events as one outbox entry's JSON array; b"" for none (no entry is written)."""
    if not events:
        return b""
    return b"[" + b",".join([_object(event) for event in events]) + b"]"


def open_started(event: AuditEvent) -> bytes:
    """A ``started`` event's JSON object without its last member's value: it ends in
    ``"deliveries":``. The script that begins the delivery counts it, then appends the
    count and the closing brace: the event then holds what ``encode_events`` writes for it
    with a field ``deliveries`` added."""
    return _object(event)[:-1] + b',"deliveries":'


def _object(event: AuditEvent) -> bytes:
    """``event.as_object()`` as JSON."""
    own = orjson.dumps(
        {
            "event_id": event.event_id,
            "type": event.type,
            "task_id": event.task_id,
            "ts": event.ts,
            **event.fields,
        }
    )
    context = event.context
    if context is None:
        return own
    members = context.encoded
    if members is None:
        members = context.encoded = _members(context)
    return own[:-1] + members + b"}" if members else own


def _members(context: EventContext) -> bytes:
    """The shared fields as JSON object members, each after a comma."""
    return b"," + orjson.dumps(context.fields)[1:-1] if context.fields else b""
