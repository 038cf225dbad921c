"""Audit events as a shard's outbox holds them: one encoder, used by every backend.

An outbox entry's ``events`` field is a JSON array of event objects
(``contract/events.py``). Callers hand the bus event objects; only this module turns them
into bytes, so the format the audit store, the console and the webhooks read is written
in one place: each event as its ``as_object()``.

Every task's ``started`` and terminal events are written from their fields with the
fields their delivery's events share encoded once per delivery (``EventContext``), not
built as objects and encoded whole: that way cost the worker about 9% more instructions
per task (``docs/benchmarks.md``)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from deepagents.contract.events import AuditEvent, Ended, EventContext, Started


def encode_events(events: Sequence[AuditEvent | Ended]) -> bytes:
    """The events as one outbox entry's JSON array; b"" for none (no entry is written)."""
    if not events:
        return b""
    return b"[" + b",".join([_object(event) for event in events]) + b"]"


def open_started(event: Started) -> bytes:
    """A ``started`` event's JSON object without its last member's value: it ends in
    ``"deliveries":``. The script that begins the delivery counts it, then appends the
    count and the closing brace (``close_started``). Its id (UUIDv7 text) needs no
    escaping, as the terminal event's id and type (a name of ``EVENT_TYPES``)."""
    return (
        b'{"event_id":"%s","type":"started","task_id":%s,"ts":%s,"queue_ms":%d%s,"deliveries":'
        % (
            event.event_id.encode(),
            orjson.dumps(event.task_id),
            orjson.dumps(event.ts),
            event.queue_ms,
            _shared(event.context),
        )
    )


def close_started(opened: bytes, deliveries: int) -> bytes:
    """What the begin script appends to ``open_started``'s JSON once it counted the delivery."""
    return b"%s%d}" % (opened, deliveries)


def _object(event: AuditEvent | Ended) -> bytes:
    if isinstance(event, Ended):
        return (
            b'{"event_id":"%s","type":"%s","task_id":%s,"ts":%s,"result":%s%s,"deliveries":%d}'
            % (
                event.event_id.encode(),
                event.type.encode(),
                orjson.dumps(event.task_id),
                orjson.dumps(event.ts),
                event.result_json,
                _shared(event.context),
                event.deliveries,
            )
        )
    return orjson.dumps(event.as_object())


def _shared(context: EventContext) -> bytes:
    """The delivery's shared fields as JSON object members, each after a comma: encoded at
    its first event, pasted into the others."""
    members = context.encoded
    if members is None:
        body = orjson.dumps(context.fields)[1:-1]
        members = context.encoded = b"," + body if body else b""
    return members
