"""Webhooks: the deliveries the audit writer queues for each configured endpoint after it
committed their events, and the dispatcher that POSTs them, signed (docs/webhooks.md)."""

from deepagents.store.webhooks.dispatch import WebhookDispatcher
from deepagents.store.webhooks.events import Delivery, deliveries
from deepagents.store.webhooks.queue import EndpointStatus, WebhookQueue

__all__ = ["Delivery", "EndpointStatus", "WebhookDispatcher", "WebhookQueue", "deliveries"]
