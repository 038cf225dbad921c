"""Audit events as a shard's outbox holds them: one encoder, used by every backend.

An outbox entry's ``events`` field is a JSON array of event objects
(``contract/events.py``). Callers hand the bus ``AuditEvent`` objects; only this module
turns them into bytes, so the format the audit store, the console and the webhooks read
is written in one place."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from deepagents.contract.events import AuditEvent


def encode_events(events: Sequence[AuditEvent]) -> bytes:
    """The events as one outbox entry's JSON array; b"" for none (no entry is written)."""
    if not events:
        return b""
    return orjson.dumps([event.as_object() for event in events])


def open_started(event: AuditEvent) -> bytes:
    """A ``started`` event's JSON object without its last member's value: it ends in
    ``"deliveries":``. The script that begins the delivery counts it, then appends the
    count and the closing brace: the event is then what ``encode_events`` writes for it
    with a last field ``deliveries``."""
    return orjson.dumps(event.as_object())[:-1] + b',"deliveries":'
