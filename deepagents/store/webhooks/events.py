"""Which audit events become webhook deliveries, and the body each endpoint receives.

The events come from the audit writer's batch after it committed them (redacted as the
audit log stores them): a ``waiting`` event is a ``question``, an event that ends a task's
story (``succeeded``, ``failed``, ``dropped``, ``expired``, ``dead_lettered``) a ``result``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import orjson

from deepagents.config.webhooks import WebhookConfig, WebhookEvent
from deepagents.store.audit.events import Row
from deepagents.store.audit.task_events import TaskEvent, event_from_row


@dataclass(frozen=True, slots=True)
class Delivery:
    """One event to POST to one endpoint; ``event_id`` is the receiver's de-duplication key."""

    endpoint: str
    event_id: str
    body: bytes


def kind_of(event: TaskEvent) -> WebhookEvent | None:
    if event.type == "waiting":
        return WebhookEvent.QUESTION
    if event.final:
        return WebhookEvent.RESULT
    return None


def body_of(event: TaskEvent, kind: WebhookEvent) -> bytes:
    """``id`` (the audit event id), ``type``, ``created``, the task's identity, and the
    audit event itself (its columns that are set: a question's text in ``detail``, a
    result's ``status``, ``output`` and ``error``)."""
    data = event.data
    return orjson.dumps(
        {
            "id": event.event_id,
            "type": kind.value,
            "created": data.get("ts"),
            "task_id": data.get("task_id"),
            "tenant": data.get("tenant"),
            "agent": data.get("agent"),
            "event": data,
        },
        default=str,  # a Decimal or a date a column may hold
    )


def deliveries(webhooks: Mapping[str, WebhookConfig], rows: Iterable[Row]) -> list[Delivery]:
    """Every (endpoint, event) pair the config asks for, in the rows' order."""
    out: list[Delivery] = []
    for row in rows:
        event = event_from_row(row)
        kind = kind_of(event)
        if kind is None:
            continue
        tenant, agent = event.data.get("tenant"), event.data.get("agent")
        body: bytes | None = None
        for name, hook in webhooks.items():
            if hook.wants(kind, tenant, agent):
                body = body or body_of(event, kind)
                out.append(Delivery(name, event.event_id, body))
    return out
